#!/usr/bin/env bash
# Configures and builds k3eval into build/ (Release). Installs missing packages first.
# Usage: jobs/build.sh [extra cmake -D options]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/jobs/install_deps.sh"
build="${K3_BUILD_DIR:-$root/build}"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
# K3_BUILD_TARGETS (space separated) limits the build, e.g. to the sanitizer test binaries.
targets=()
for t in ${K3_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "${K3_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
