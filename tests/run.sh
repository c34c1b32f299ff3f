#!/usr/bin/env bash
# Installs what is missing, builds k3eval from scratch if needed, and runs every test:
#   * build/      Release: unit tests, MPI tests under mpirun (1, 8, 64 ranks), CLI tests;
#   * build-asan/ quant, tokenizer, checkpoint, eval and one-rank engine tests again under
#                 AddressSanitizer + UBSan;
#   * build-fuzz/ libFuzzer on the safetensors, GGUF and ModelSlim-description readers.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

jobs/install_deps.sh
jobs/build.sh

# Oversubscribed MPI ranks on 2 cores, as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

passed=0
failed=0
stage() {  # stage NAME COMMAND...: runs one stage, counts it
  if "${@:2}"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "stage $1 FAILED" >&2; fi
}

stage release bash -c 'cd build && ctest --output-on-failure -j "$(nproc)"'

# Everything that decodes untrusted bytes, again under AddressSanitizer + UBSan.
K3_BUILD_DIR="$root/build-asan" K3_BUILD_TARGETS="common_tests quant_tests tokenizer_tests model_tests eval_tests engine_tests k3ckpt" \
  jobs/build.sh -DK3_SANITIZE=ON -DK3_BUILD_BENCHMARKS=OFF
stage sanitizers bash -c 'cd build-asan && ctest --output-on-failure -j "$(nproc)" -L "common|quant|tokenizer|model|eval|engine" -LE mpi'

# The untrusted-input readers under libFuzzer (clang, ASan + UBSan), a bounded time each.
stage fuzzing tests/fuzz/run_fuzzers.sh "${K3_FUZZ_SECONDS:-60}"

echo "stages: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
