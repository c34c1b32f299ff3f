#!/usr/bin/env bash
# Installs what is missing, builds k3eval from scratch if needed, and runs every test:
#   * build/      Release: unit tests, MPI tests under mpirun (1, 8, 64 ranks), CLI tests;
#   * build-asan/ quant and tokenizer tests again under AddressSanitizer + UBSan.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

jobs/install_deps.sh
jobs/build.sh

# Oversubscribed MPI ranks on 2 cores, as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

status=0
(cd build && ctest --output-on-failure -j "$(nproc)") || status=1

# Everything that decodes untrusted bytes, again under AddressSanitizer + UBSan.
K3_BUILD_DIR="$root/build-asan" K3_BUILD_TARGETS="quant_tests tokenizer_tests" \
  jobs/build.sh -DK3_SANITIZE=ON -DK3_BUILD_BENCHMARKS=OFF
(cd build-asan && ctest --output-on-failure -j "$(nproc)" -L "quant|tokenizer") || status=1
exit $status
