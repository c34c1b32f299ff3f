#!/usr/bin/env bash
# Installs the Debian packages k3eval builds and runs with, and nothing else.
# Usage: jobs/install_deps.sh [quickstart|all] [--missing]
#   quickstart  what building and running k3eval, k3ckpt and k3report needs
#   all         (default) that and what the tests use: GoogleTest, Google Benchmark, clang for
#               the sanitizer tree and the fuzzers, a single-host Slurm, iproute2 for several hosts on one machine
#   --missing   print the missing packages of the set, one line, and install nothing
# Idempotent and silent when everything is already present; safe to call from every script.
set -euo pipefail

profile=all
list_only=0
for a in "$@"; do
  case $a in
    quickstart | all) profile=$a ;;
    --missing) list_only=1 ;;
    *) echo "install_deps: unknown argument '$a' (expected quickstart, all or --missing)" >&2; exit 2 ;;
  esac
done

packages=(
  g++ cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libboost-program-options-dev
  libhdf5-dev hdf5-tools
  libtbb-dev
  libspdlog-dev libfmt-dev
  nlohmann-json3-dev libsimdjson-dev
  libpcre2-dev
)
if [[ $profile == all ]]; then
  packages+=(
    libgtest-dev libgmock-dev
    clang clang-14 libclang-rt-14-dev  # clang: the `clang`/`clang++` names the scripts call
    libbenchmark-dev
    # A single-host Slurm for jobs/slurm/ and tests/slurm/ (srun --mpi=pmix: Slurm's pmix_v4
    # plugin and Debian's Open MPI share libpmix2, which libopenmpi-dev already pulls in).
    slurm-wlm slurmctld slurmd slurm-client munge libpmix2
    # Several hosts on one machine for tests/multihost/ (network namespaces, a bridge, tc).
    iproute2
  )
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ $list_only -eq 1 ]]; then
  echo "${missing[*]}"
  exit 0
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install_deps: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
