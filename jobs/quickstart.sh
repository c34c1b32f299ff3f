#!/usr/bin/env bash
# Runs the main job on the embedded default: k3eval on 8 local ranks with jobs/configs/quickstart.ini.
# Installs and builds whatever is missing first. Extra arguments go to k3eval.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/jobs/build.sh"

np=${K3_NP:-8}
mpirun_args=(--oversubscribe -np "$np")
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Ranks outnumber cores: waiting ranks must yield instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
exec mpirun "${mpirun_args[@]}" "$root/build/bin/k3eval" \
  --config "$root/jobs/configs/quickstart.ini" "$@"
