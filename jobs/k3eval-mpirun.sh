#!/usr/bin/env bash
# Runs k3eval under mpirun on a host without Slurm, with the same INI configs as the sbatch
# scripts of jobs/slurm/, and keeps the run's artifacts in a directory of its own.
#
# Usage: jobs/k3eval-mpirun.sh [-n N] [--small-host] [--allow-run-as-root] CONFIG.ini [k3eval options...]
#   -n N                  ranks (default 64, the production shape)
#   --small-host          more ranks than cores: mpirun --oversubscribe, waiting ranks yield
#                         (OMPI_MCA_mpi_yield_when_idle=1), and the root override when run as root
#   --allow-run-as-root   only the root override (OMPI_ALLOW_RUN_AS_ROOT*)
#   -h, --help            this text
# The k3eval options follow the config on its command line, so they override its keys, e.g.
#   jobs/k3eval-mpirun.sh --small-host -n 64 jobs/configs/production.ini --ranks-per-node 16 \
#       --model-path build/checkpoints/tiny-hf
#   jobs/k3eval-mpirun.sh --small-host -n 8 jobs/configs/nightly-gsm8k.ini --tp 8 --ep 8 --model-path ...
#
# Environment (all optional):
#   K3EVAL             the k3eval binary (default: build/bin/k3eval in this repository)
#   K3_MODEL_PATH      passed as --model-path
#   K3_ARTIFACTS_ROOT  parent of the per-run directory (default: ./artifacts)
#   K3_ARTIFACTS_DIR   the per-run directory itself (default: $K3_ARTIFACTS_ROOT/<UTC time>-<pid>)
#   K3_MPIRUN_ARGS     extra mpirun options, split on whitespace (e.g. "--mca btl self,vader")
# The artifacts directory holds job.txt, config.ini, stdout.log, stderr.log and logs/rank-NNNNN.log, as for
# a Slurm job. Exit code: k3eval's (0 ok, 1 regression verdict, 2 usage or input error, 3 internal);
# 3 as well when mpirun ended the job (a rank killed, a host lost), whose status then names the rank
# or the host and its ranks, and what rank 0 was waiting in.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/lib/record.sh
source "$root/jobs/lib/record.sh"

usage() { sed -n '5,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
np=64
small_host=0
allow_root=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -n | -np) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; np=$2; shift 2 ;;
    --small-host) small_host=1; shift ;;
    --allow-run-as-root) allow_root=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "k3eval-mpirun.sh: unknown option '$1' before the config (k3eval options go after it)" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "k3eval-mpirun.sh: no config file" >&2; usage >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "k3eval-mpirun.sh: -n '$np' is not a positive number" >&2; exit 2; }
config=$1
shift
[[ -f $config ]] || { echo "k3eval-mpirun.sh: no config file '$config'" >&2; exit 2; }
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
k3eval=${K3EVAL:-$root/build/bin/k3eval}
[[ -x $k3eval ]] || { echo "k3eval-mpirun.sh: no k3eval binary at '$k3eval' (run jobs/build.sh)" >&2; exit 2; }

mpirun_args=()
read -ra mpirun_args <<<"${K3_MPIRUN_ARGS:-}"
# A lost host must end the job, not hang it: by default mpirun notices a daemon whose link is cut
# only after its TCP keepalive gives up (300 s idle + 9 x 20 s probes). Probing after 4 s idle,
# every 2 s, 3 times, it ends the job about 10 s after the cut (the kernel answers probes, so a
# busy or stopped host is not mistaken for a lost one); its ranks get 3 s between SIGTERM and
# SIGKILL, in which rank 0 records what it was waiting in. K3_MPIRUN_ARGS naming any of these
# settings replaces ours.
if [[ " ${mpirun_args[*]} " != *keepalive* ]]; then
  mpirun_args+=(--mca oob_tcp_keepalive_time 4 --mca oob_tcp_keepalive_intvl 2
    --mca oob_tcp_keepalive_probes 3)
fi
if [[ " ${mpirun_args[*]} " != *odls_base_sigkill_timeout* ]]; then
  mpirun_args+=(--mca odls_base_sigkill_timeout 3)
fi
if [[ $small_host -eq 1 ]]; then
  mpirun_args+=(--oversubscribe)
  # mpirun --oversubscribe already makes waiting ranks yield; exported as well so that it also
  # holds if the oversubscription comes from a hostfile's slots instead.
  export OMPI_MCA_mpi_yield_when_idle=1
  [[ $(id -u) -eq 0 ]] && allow_root=1
elif [[ $np -gt $(nproc) ]]; then
  echo "k3eval-mpirun.sh: note: $np ranks on $(nproc) cores; pass --small-host if mpirun reports too few slots" >&2
fi
if [[ $allow_root -eq 1 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
elif [[ $(id -u) -eq 0 && -z ${OMPI_ALLOW_RUN_AS_ROOT:-} ]]; then
  echo "k3eval-mpirun.sh: running as root: mpirun refuses unless asked; pass --allow-run-as-root (or --small-host)" >&2
  exit 2
fi

# One directory per run: UTC time to the second plus this shell's pid, so that runs started in
# the same second do not collide.
run_id=$(date -u +%Y%m%dT%H%M%SZ)-$$
artifacts=$(k3_artifacts_dir "${K3_ARTIFACTS_DIR:-${K3_ARTIFACTS_ROOT:-$PWD/artifacts}/$run_id}" "$config")

args=(--config "$config" --artifacts-dir "$artifacts")
[[ -n ${K3_MODEL_PATH:-} ]] && args+=(--model-path "$K3_MODEL_PATH")
args+=("$@")
# --map-by slot keeps the ranks of one host a contiguous block, as the layout assumes.
cmd=(mpirun -np "$np" --map-by slot "${mpirun_args[@]}" "$k3eval" "${args[@]}")
echo "k3eval run $run_id: $np ranks, config $config, artifacts $artifacts" >&2
header="run_id: $run_id
host: $(hostname)
tasks: $np
config: $config"
rc=0
k3_run_recorded "$artifacts" "$root" "$k3eval" "$header" "${cmd[@]}" || rc=$?
echo "k3eval run $run_id: exit code $rc" >&2
exit "$rc"
