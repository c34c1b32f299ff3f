#!/usr/bin/env bash
# Installs what is missing, builds k3eval from scratch if needed, and runs every test:
#   * build/      Release: unit tests, MPI tests under mpirun (1, 8, 64 ranks), CLI tests, the
#                 mutation run (tests/mutants/);
#   * build-asan/ quant, tokenizer, checkpoint, eval and one-rank engine tests again under
#                 AddressSanitizer + UBSan (built at -O1);
#   * build-fuzz/ libFuzzer on the untrusted-input readers, one target per core at a time.
# The sanitizer and fuzzing trees are built while the release tests run, on the CPU time those
# leave idle: the builds run under SCHED_IDLE, so any test process that wants a core preempts
# them at once and the tests' timing is theirs as before. Their output goes to
# build/build-asan.log and build/build-fuzz.log.
# Prints each step's wall time as it ends, and all of them at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Every step's wall time, printed as it ends and again at the end.
step_times=()
timed() {  # timed NAME COMMAND...: runs COMMAND, records its time, returns its status
  local t0=$SECONDS rc=0
  "${@:2}" || rc=$?
  step_times+=("$(printf '%-22s %5d s%s' "$1" $((SECONDS - t0)) "$([[ $rc -eq 0 ]] || echo ' FAILED')")")
  echo "run.sh: ${step_times[-1]}"
  return $rc
}
passed=0
failed=0
stage() {  # stage NAME COMMAND...: a timed stage, counted; a failed one does not stop the run
  if timed "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "stage $1 FAILED" >&2; fi
}

timed packages jobs/install_deps.sh
# The tests and benchmarks are configured in, also in a tree the quickstart made without them.
timed build jobs/build.sh -DBUILD_TESTING=ON -DK3_BUILD_BENCHMARKS=ON

# Oversubscribed MPI ranks on 2 cores, as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

# The sanitizer tree holds what the sanitizer stage runs (and k3ckpt, which its tests call); the
# fuzzing tree, the fuzz targets. Each build's output goes to a log in build/, whose end is
# printed when the build fails.
logged() {  # logged LOG COMMAND...
  "${@:2}" >"$1" 2>&1 || { echo "run.sh: '${*:2}' failed; the end of $1:"; tail -30 "$1"; return 1; }
}
build_asan() {
  K3_BUILD_DIR="$root/build-asan" \
    K3_BUILD_TARGETS="common_tests quant_tests tokenizer_tests model_tests eval_tests engine_tests k3ckpt" \
    logged "$root/build/build-asan.log" jobs/build.sh -DK3_SANITIZE=ON -DK3_BUILD_BENCHMARKS=OFF
}
build_fuzz() { logged "$root/build/build-fuzz.log" tests/fuzz/run_fuzzers.sh --build-only; }
# Both, under SCHED_IDLE, beside the release tests; each tree's status goes to build/*.built.
rm -f "$root"/build/build-{asan,fuzz}.built
(
  # Before any child is forked, which inherits it; where the policy cannot be set, the builds
  # share the cores as ordinary processes.
  chrt --idle -p 0 $BASHPID || echo "run.sh: SCHED_IDLE refused; the background builds run at normal priority"
  t0=$SECONDS
  build_asan && touch "$root/build/build-asan.built"
  t1=$SECONDS
  build_fuzz && touch "$root/build/build-fuzz.built"
  echo "run.sh: in the background, build-asan took $((t1 - t0)) s and build-fuzz $((SECONDS - t1)) s"
) &
builds_pid=$!

stage release bash -c 'cd build && ctest --output-on-failure -j "$(nproc)"'

# The builds' remainder, with the machine to themselves (nothing preempts an idle-class task
# then). A tree that failed in the background is built again here.
timed finish-builds wait $builds_pid
[[ -f build/build-asan.built ]] || timed build-asan build_asan || true
[[ -f build/build-fuzz.built ]] || timed build-fuzz build_fuzz || true

# Everything that decodes untrusted bytes, again under AddressSanitizer + UBSan.
stage sanitizers bash -c 'cd build-asan && ctest --output-on-failure -j "$(nproc)" -L "common|quant|tokenizer|model|eval|engine" -LE mpi'

# The untrusted-input readers under libFuzzer (clang, ASan + UBSan), a bounded time each.
stage fuzzing tests/fuzz/run_fuzzers.sh "${K3_FUZZ_SECONDS:-60}"

printf '%s\n' "${step_times[@]}"
echo "stages: $passed passed, $failed failed; $SECONDS s in all"
[[ $failed -eq 0 ]]
