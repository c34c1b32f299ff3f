#!/usr/bin/env bash
# Where a ctest run's time goes: runs ctest in a build tree while sampling /proc/stat every
# second, then prints ctest's verdict (a failure also fails this script), the run's wall time and
# how many of the machine's cores were busy, each test's wall time and busy cores (the 40
# longest), and the core-seconds left idle inside the tests that ran alone (RUN_SERIAL: no other
# test beside them), the time only less waiting in those tests can win back.
# Usage: tests/bench/bench_test_time.sh BUILD_DIR [ctest arguments, default -j $(nproc)]
# Example: tests/bench/bench_test_time.sh build -j 2 -L mpi
set -euo pipefail
build=${1:?usage: bench_test_time.sh BUILD_DIR [ctest arguments]}
shift
[[ $# -gt 0 ]] || set -- -j "$(nproc)"
out=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

(while :; do echo "$(date +%s.%N) $(head -n1 /proc/stat)"; sleep 1; done) >"$out/stat" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
(cd "$build" && ctest "$@" 2>&1) | while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$out/ctest" || true
kill $sampler 2>/dev/null || true
# ctest's verdict and the tests it names as failed, as it printed them.
summary=$(grep -E 'tests passed' "$out/ctest" | cut -d' ' -f2-) ||
  { echo "ctest printed no summary: $(tail -5 "$out/ctest")" >&2; exit 1; }
echo "ctest: $summary"
sed -n '/The following tests FAILED/,$p' "$out/ctest" | cut -d' ' -f2-

python3 - "$out" "$(nproc)" <<'PY'
import bisect, re, sys
out, cores = sys.argv[1], int(sys.argv[2])
samples = []  # (time, total jiffies, idle + iowait jiffies)
for line in open(out + "/stat"):
    f = line.split()
    values = list(map(int, f[2:]))
    samples.append((float(f[0]), sum(values), values[3] + values[4]))
times = [s[0] for s in samples]

def busy_cores(a, b):
    """Cores busy on average between times a and b (None when no two samples fall inside)."""
    i, j = bisect.bisect_left(times, a), bisect.bisect_right(times, b) - 1
    if j <= i or samples[j][1] == samples[i][1]:
        return None
    total, idle = samples[j][1] - samples[i][1], samples[j][2] - samples[i][2]
    return cores * (1 - idle / total)

start, tests = {}, []
for line in open(out + "/ctest"):
    m = re.match(r"(\S+)\s+Start\s+\d+: (\S+)", line)
    if m:
        start[m.group(2)] = float(m.group(1))
        continue
    m = re.match(r"(\S+)\s+\d+/\d+ Test\s+#\d+: (\S+) ", line)
    if m and m.group(2) in start:
        tests.append((m.group(2), start[m.group(2)], float(m.group(1))))
if not tests:
    sys.exit("no test ran")
first, last = min(t[1] for t in tests), max(t[2] for t in tests)
print(f"{len(tests)} tests, {last - first:.0f} s, {busy_cores(first, last) or 0:.2f} of {cores} cores busy")
rows, alone_wall, alone_idle = [], 0.0, 0.0
for name, a, b in tests:
    alone = all(not (o[1] < b and o[2] > a) for o in tests if o[0] != name)
    busy = busy_cores(a, b)
    rows.append((b - a, name, alone, busy))
    if alone and busy is not None:
        alone_wall += b - a
        alone_idle += (b - a) * (cores - busy)
for wall, name, alone, busy in sorted(rows, reverse=True)[:40]:
    shown = f"{busy:.2f}" if busy is not None else "-"
    print(f"{wall:7.1f} s  {shown:>5} cores  {'alone' if alone else '     '}  {name}")
print(f"tests that ran alone: {alone_wall:.0f} s, {alone_idle:.0f} core-s idle inside them")
PY
rm -rf "$out"
[[ $summary == "100% tests passed"* ]]
