#!/usr/bin/env bash
# The body shared by the sbatch scripts of jobs/slurm/: runs k3eval over the whole allocation with
# `srun --mpi=pmix` (Debian's Open MPI has no PMI2 support) and keeps the job's artifacts in a
# directory named by the Slurm job id. Call it from inside an allocation (sbatch or salloc):
#   jobs/slurm/srun-k3eval.sh CONFIG.ini [k3eval options...]
# The options follow the config on k3eval's command line, so they override its keys.
#
# Environment (all optional):
#   K3_ROOT            the repository (default: the directory above jobs/)
#   K3EVAL             the k3eval binary (default: $K3_ROOT/build/bin/k3eval)
#   K3_MODEL_PATH      passed as --model-path
#   K3_ARTIFACTS_ROOT  parent of the per-job directory (default: $SLURM_SUBMIT_DIR/artifacts)
#   K3_ARTIFACTS_DIR   the per-job directory itself (default: $K3_ARTIFACTS_ROOT/$SLURM_JOB_ID)
#   K3_SRUN_ARGS       extra srun options, split on whitespace (e.g. "--cpu-bind=cores")
#   K3_LAUNCHER_GRACE  seconds srun may outlive k3eval's final status before it is ended (default 8;
#                      srun waits KillWait + 2 s for the step daemon of a node it lost)
# The artifacts directory holds job.txt (what ran, where, exit code), config.ini (the config
# used), stdout.log (rank 0's results) and logs/rank-NNNNN.log (every rank's full log).
# Exit code: k3eval's (0 ok, 1 regression verdict, 2 usage or input error, 3 internal), so a
# failing k3eval makes the Slurm job FAILED with that exit code.
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: srun-k3eval.sh CONFIG.ini [k3eval options...]" >&2; exit 2; }
[[ -n ${SLURM_JOB_ID:-} ]] || { echo "srun-k3eval.sh: not inside a Slurm allocation (use sbatch)" >&2; exit 2; }
config=$1
shift
K3_ROOT=${K3_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
k3eval=${K3EVAL:-$K3_ROOT/build/bin/k3eval}
[[ -f $config ]] || { echo "srun-k3eval.sh: no config file '$config'" >&2; exit 2; }
[[ -x $k3eval ]] || { echo "srun-k3eval.sh: no k3eval binary at '$k3eval' (run jobs/build.sh)" >&2; exit 2; }
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
# shellcheck source=jobs/lib/record.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/record.sh"

artifacts=$(k3_artifacts_dir \
  "${K3_ARTIFACTS_DIR:-${K3_ARTIFACTS_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}/artifacts}/$SLURM_JOB_ID}" "$config")

args=(--config "$config" --artifacts-dir "$artifacts")
[[ -n ${K3_MODEL_PATH:-} ]] && args+=(--model-path "$K3_MODEL_PATH")
args+=("$@")
srun_args=()
read -ra srun_args <<<"${K3_SRUN_ARGS:-}"

# Ranks may outnumber cores (a test cluster declaring 64 CPUs on 2, or hyperthreads): waiting
# ranks must yield, or they spin and starve the working ones. Open MPI cannot know it is
# oversubscribed under a direct srun launch, so nothing else sets this.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

# Ranks of one node must be one contiguous block (--distribution=block), as the layout assumes;
# one failing rank ends the step (--kill-on-bad-exit) instead of leaving the others waiting.
cmd=(srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 "${srun_args[@]}" "$k3eval" "${args[@]}")
echo "k3eval job $SLURM_JOB_ID: ${SLURM_NTASKS:-?} tasks on ${SLURM_JOB_NODELIST:-?}, config $config, artifacts $artifacts" >&2
header="job_id: $SLURM_JOB_ID
job_name: ${SLURM_JOB_NAME:-}
nodes: ${SLURM_JOB_NUM_NODES:-?} (${SLURM_JOB_NODELIST:-?})
tasks: ${SLURM_NTASKS:-?}
config: $config"
rc=0
k3_run_recorded "$artifacts" "$K3_ROOT" "$k3eval" "$header" "${cmd[@]}" || rc=$?
echo "k3eval job $SLURM_JOB_ID: exit code $rc" >&2
exit "$rc"
