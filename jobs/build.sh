#!/usr/bin/env bash
# Configures and builds k3eval into build/ (Release). Installs missing packages first.
# Usage: jobs/build.sh [extra cmake -D options]
#   K3_BUILD_DIR      the build tree (default build/)
#   K3_BUILD_TARGETS  space-separated targets to build (default: all)
#   K3_DEPS           the package set to install: all (default) or quickstart, which builds a
#                     new tree without the tests and benchmarks (their packages are absent)
# Extra options reconfigure an existing tree; without them an existing tree is only built.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${K3_DEPS:-all}
"$root/jobs/install_deps.sh" "$deps"
build="${K3_BUILD_DIR:-$root/build}"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  without_tests=()
  [[ $deps == quickstart ]] && without_tests=(-DBUILD_TESTING=OFF -DK3_BUILD_BENCHMARKS=OFF)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${without_tests[@]}" "$@" >/dev/null
elif [[ $# -gt 0 ]]; then
  cmake -S "$root" -B "$build" "$@" >/dev/null
fi
targets=()
for t in ${K3_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "${K3_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
