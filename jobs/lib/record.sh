# Sourced by jobs/k3eval-mpirun.sh and jobs/slurm/srun-k3eval.sh: the per-run artifacts directory
# and the run-and-record block both launchers share (job.txt, stdout.log, the exit code).

# k3_artifacts_dir DIR CONFIG: creates DIR, copies CONFIG into it as config.ini, prints DIR's
# absolute path.
k3_artifacts_dir() {
  mkdir -p "$1"
  local dir
  dir=$(cd "$1" && pwd)
  cp "$2" "$dir/config.ini"
  echo "$dir"
}

# k3_run_recorded ARTIFACTS ROOT K3EVAL HEADER COMMAND...: writes ARTIFACTS/job.txt (the HEADER
# lines, then k3eval's version, ROOT's git revision, the command and the start time), runs
# COMMAND with its stdout shown and kept in ARTIFACTS/stdout.log, appends the end time and the
# exit code to job.txt, and returns COMMAND's exit code (call it as `k3_run_recorded ... || rc=$?`).
k3_run_recorded() {
  local artifacts=$1 root=$2 k3eval=$3 header=$4
  shift 4
  {
    printf '%s\n' "$header"
    echo "k3eval: $k3eval ($("$k3eval" --version 2>/dev/null || echo 'version unknown'))"
    echo "revision: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "command: $*"
    echo "start: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$artifacts/job.txt"
  local rc
  set +e
  "$@" | tee "$artifacts/stdout.log"
  rc=${PIPESTATUS[0]}
  set -e
  {
    echo "end: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "exit_code: $rc"
  } >>"$artifacts/job.txt"
  return "$rc"
}
