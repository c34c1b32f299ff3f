#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for a
# bounded CPU time, one process per core at a time (K3_FUZZ_JOBS sets how many), seeded with
# tests/fuzz/seeds/<target>/ and the headers, configs and vocabularies of freshly synthesized
# checkpoints. Inputs in tests/fuzz/regressions/<target>/ (past crashes) are replayed first.
# A crash fails the run and leaves its input in build-fuzz/crashes/ for a regression test.
# Usage: tests/fuzz/run_fuzzers.sh [seconds per target, default 60]
#        tests/fuzz/run_fuzzers.sh --build-only   (configures and builds the targets, runs nothing)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "run_fuzzers.sh: seconds per target must be a whole number, not '$seconds'" >&2; exit 2; }
build=$root/build-fuzz
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DK3_SANITIZE=ON -DK3_FUZZ=ON -DK3_BUILD_BENCHMARKS=OFF -DBUILD_TESTING=OFF >/dev/null
fi
targets=(fuzz_safetensors fuzz_gguf fuzz_modelslim_description fuzz_config_json fuzz_tiktoken)
cmake --build "$build" --parallel "$(nproc)" "${targets[@]/#/--target=}"
((build_only)) && exit 0

# Seeds from real synthetic checkpoints: a small complete GGUF header file and safetensors
# header prefixes (the reader reports them truncated, which still drives the whole parser).
seeds=$build/seeds
rm -rf "$seeds"
for t in "${targets[@]}"; do
  mkdir -p "$seeds/$t"
  if [[ -d $root/tests/fuzz/seeds/$t ]]; then cp "$root/tests/fuzz/seeds/$t"/* "$seeds/$t"/; fi
done
ck=$build/synth
if [[ ! -d $ck/draft ]]; then
  for format in modelslim gguf draft; do
    "$root/build/bin/k3ckpt" synth --format $format --out "$ck/$format" --shards 2 >/dev/null
  done
fi
for f in "$ck"/modelslim/*.safetensors; do
  len=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
  head -c $((8 + len)) "$f" >"$seeds/fuzz_safetensors/$(basename "$f").header"
done
cp "$ck/modelslim/quant_model_description.json" "$seeds/fuzz_modelslim_description/"
cp "$ck/modelslim/config.json" "$seeds/fuzz_config_json/"
cp "$ck/draft/config.json" "$seeds/fuzz_config_json/draft-config.json"
if [[ -f $ck/modelslim/tiktoken.model ]]; then cp "$ck/modelslim/tiktoken.model" "$seeds/fuzz_tiktoken/"; fi
for f in "$ck"/gguf/*.gguf; do head -c 65536 "$f" >"$seeds/fuzz_gguf/$(basename "$f").head"; done

# One target with WORKERS processes: its past crashes replayed, then fuzzed for $seconds CPU
# seconds in all (each worker $seconds / WORKERS, sharing the corpus, which libFuzzer reloads);
# what it printed goes to $build/$t.summary and its verdict (0 or 1) to $build/$t.rc.
fuzz_one() {
  local t=$1 workers=$2 rc=0 corpus=$build/corpus/$1 w
  local pids=()
  mkdir -p "$corpus"
  {
    if compgen -G "$root/tests/fuzz/regressions/$t/*" >/dev/null; then
      "$build/bin/$t" "$root/tests/fuzz/regressions/$t"/* || { echo "$t: a past crash is back"; rc=1; }
    fi
    echo "== $t: fuzzing for $seconds s ($workers process(es))"
    for ((w = 0; w < workers; w++)); do
      "$build/bin/$t" -max_total_time=$((seconds / workers)) -rss_limit_mb=2048 -max_len=1048576 \
        -artifact_prefix="$build/crashes/$t-" -print_final_stats=1 "$corpus" "$seeds/$t" \
        2>"$build/$t.$w.log" &
      pids+=($!)
    done
    for ((w = 0; w < workers; w++)); do
      wait "${pids[$w]}" && continue
      echo "$t: crash found; input in $build/crashes/, log in $build/$t.$w.log"
      tail -40 "$build/$t.$w.log"
      rc=1
    done
    for ((w = 0; w < workers; w++)); do
      grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$t.$w.log" | sed "s/^/  /" || true
    done
    echo "  corpus: $(ls "$corpus" | wc -l) inputs"
  } >"$build/$t.summary" 2>&1
  echo $rc >"$build/$t.rc"
}

# One fuzzing process per core at a time. A last target alone in its round (5 targets on 2
# cores) runs as one process per core for its share of the time: the same CPU time as the
# others, without a core idle for a whole round.
mkdir -p "$build/crashes"
parallel=${K3_FUZZ_JOBS:-$(nproc)}
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  workers=1
  if ((parallel > 1 && i == ${#targets[@]} - 1 && ${#targets[@]} % parallel == 1)); then
    workers=$parallel
  fi
  while [[ $(jobs -rp | wc -l) -gt $((parallel - workers)) ]]; do wait -n || true; done
  rm -f "$build/$t.rc"
  fuzz_one "$t" "$workers" &
done
wait
status=0
for t in "${targets[@]}"; do
  cat "$build/$t.summary"
  [[ $(cat "$build/$t.rc" 2>/dev/null) == 0 ]] || { echo "$t: FAILED" >&2; status=1; }
done
exit $status
