#!/usr/bin/env bash
# Installs what is missing, builds k3eval from scratch if needed, and runs every test:
#   * build/      Release: unit tests, MPI tests under mpirun (1, 8, 64 ranks), CLI tests, the
#                 mutation run (tests/mutants/);
#   * build-asan/ quant, tokenizer, checkpoint, eval and one-rank engine tests again under
#                 AddressSanitizer + UBSan (clang, which builds it about 100 s sooner than GCC
#                 on 2 cores; at -O1; the GEMM kernels the engine links are
#                 built as in release and check their buffers once per product, quant_tests'
#                 every load: quant/README.md; eval_tests' and common_tests' own code at -O0);
#   * build-fuzz/ libFuzzer on the untrusted-input readers, one process per core at a time (the
#                 tree builds beside build-asan/).
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

stage release bash -c 'cd build && ctest --output-on-failure -j "$(nproc)"'

# Everything that decodes untrusted bytes, again under AddressSanitizer + UBSan, built by clang
# (a tree configured with another compiler is made again). The fuzzing tree builds at the same
# time: alone, its one large file (the checkpoint readers) would leave a core idle for half of
# its build. Its output goes to a log file, named if it fails.
if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
fuzz_build_log=$root/build/fuzz-build.log
sanitizer_builds() {
  tests/fuzz/run_fuzzers.sh --build-only >"$fuzz_build_log" 2>&1 &
  local fuzz_build=$! rc=0
  CC=clang CXX=clang++ K3_BUILD_DIR="$root/build-asan" K3_BUILD_TARGETS="common_tests quant_tests quant_span_tests tokenizer_tests model_tests eval_tests engine_tests k3ckpt" \
    jobs/build.sh -DK3_SANITIZE=ON -DK3_BUILD_BENCHMARKS=OFF || rc=$?
  if ! wait "$fuzz_build"; then
    echo "run.sh: building the fuzzing tree failed; its output: $fuzz_build_log" >&2
    tail -30 "$fuzz_build_log" >&2
    rc=1
  fi
  return $rc
}
timed build-asan+fuzz sanitizer_builds
stage sanitizers bash -c 'cd build-asan && ctest --output-on-failure -j "$(nproc)" -L "common|quant|tokenizer|model|eval|engine" -LE mpi'

# The untrusted-input readers under libFuzzer (clang, ASan + UBSan), a bounded time each.
stage fuzzing tests/fuzz/run_fuzzers.sh "${K3_FUZZ_SECONDS:-60}"

printf '%s\n' "${step_times[@]}"
echo "stages: $passed passed, $failed failed; $SECONDS s in all"
[[ $failed -eq 0 ]]
