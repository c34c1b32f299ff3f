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
# COMMAND with its stdout and stderr shown and kept in ARTIFACTS/stdout.log and stderr.log,
# appends the end time and the exit code to job.txt (a launcher that outlives k3eval's final
# status by K3_LAUNCHER_GRACE seconds is ended, see below), finalizes the status of a job that died
# under the launcher (k3_record_unfinished), and returns COMMAND's exit code, or 3 when the
# launcher ended the job (call it as `k3_run_recorded ... || rc=$?`).
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
  # stderr is shown and kept too: when a rank dies under the launcher, only the launcher's
  # message says which rank and which signal.
  local stderr_tee
  exec 4> >(tee "$artifacts/stderr.log" >&2)
  stderr_tee=$!
  # The launcher runs in the background, watched: once k3eval's rank 0 has written a final
  # status, the outcome is known, yet a launcher can keep waiting for a lost host's daemon
  # (srun waits KillWait + 2 s for a step daemon it cannot reach). It is ended
  # K3_LAUNCHER_GRACE seconds (default 8) after the final status, and the status's exit code
  # is the job's.
  local state
  state=$(mktemp -d)
  (
    "$@" 2>&4 &
    echo $! >"$state/pid"
    wait $!
    echo $? >"$state/rc"
  ) 2>/dev/null | tee "$artifacts/stdout.log" &
  local pipeline=$! grace=${K3_LAUNCHER_GRACE:-8} final_since="" word ended_by_wrapper=""
  while kill -0 "$pipeline" 2>/dev/null; do
    word=""
    # Only a status this run wrote (a resumed run's directory holds the last run's).
    [[ -s $state/pid && -n $(find "$artifacts/status" -newer "$state/pid" 2>/dev/null) ]] &&
      word=$(head -n1 "$artifacts/status" 2>/dev/null || true)
    if [[ $word =~ ^(ok|regression|error|failed)$ && ! -f $state/rc ]]; then
      final_since=${final_since:-$SECONDS}
      if ((SECONDS - final_since >= grace)); then
        ended_by_wrapper="the launcher still ran $grace s after k3eval's final status ($word); the wrapper ended it"
        kill -TERM "$(<"$state/pid")" 2>/dev/null
        sleep 2
        kill -KILL "$(<"$state/pid")" 2>/dev/null
        break
      fi
    fi
    sleep 0.5
  done
  wait "$pipeline"
  exec 4>&-
  wait "$stderr_tee"  # stderr.log is complete
  set -e
  if [[ -n $ended_by_wrapper ]]; then
    case $word in ok) rc=0 ;; regression) rc=1 ;; error) rc=2 ;; *) rc=3 ;; esac
    echo "k3eval: $ended_by_wrapper" >&2
  else
    rc=$(cat "$state/rc" 2>/dev/null || echo 3)
  fi
  rm -rf "$state"
  {
    echo "end: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "exit_code: $rc"
    [[ -z $ended_by_wrapper ]] || echo "note: $ended_by_wrapper"
  } >>"$artifacts/job.txt"
  # A job the launcher ended (its exit code is the launcher's, not one of k3eval's 0-3) is an
  # internal failure: exit 3, as when k3eval itself ends the job.
  if k3_record_unfinished "$artifacts" "$rc" || [[ $rc -gt 3 ]]; then
    rc=3
  fi
  return "$rc"
}

# k3_host_ranks ARTIFACTS HOST: the world ranks on HOST ("4-7"), from the hosts.txt k3eval
# writes once the nodes are known; empty when it did not get that far.
k3_host_ranks() {
  awk -v host="$2" '$1 == host { print $2 }' "$1/hosts.txt" 2>/dev/null | paste -sd, -
}

# k3_launcher_reason ARTIFACTS RC: why the launcher ended the job, from its own message in
# ARTIFACTS/stderr.log (mpirun: "ORTE has lost communication with a remote daemon ... on node
# h2", "process rank 3 with PID ... exited on signal 9 (Killed)"; srun: "task 3: Killed"), else
# the exit code.
k3_launcher_reason() {
  local artifacts=$1 rc=$2 file=$1/stderr.log line host ranks
  host=$(grep -A3 -m1 'ORTE has lost communication with a remote daemon' "$file" 2>/dev/null |
    sed -nE 's/^ *Remote daemon *: .* on node ([^ ]+).*/\1/p' | head -n1)
  if [[ -n $host ]]; then
    ranks=$(k3_host_ranks "$artifacts" "$host")
    echo "host $host${ranks:+ (ranks $ranks)} lost: mpirun lost contact with its daemon there (mpirun)"
    return
  fi
  line=$(grep -m1 -oE 'process rank [0-9]+ with PID [0-9]+ on node [^ ]+ exited on signal [0-9]+( \([^)]*\))?' "$file" 2>/dev/null || true)
  if [[ -n $line ]]; then
    sed -E 's/process rank ([0-9]+) with PID ([0-9]+) on node ([^ ]+) exited on signal ([0-9]+)(.*)/rank \1 on \3 exited on signal \4\5 (mpirun)/' <<<"$line"
    return
  fi
  line=$(grep -m1 -oE 'task [0-9]+: (Killed|Terminated|Segmentation fault|Aborted|Bus error|Out Of Memory|Exited with exit code [0-9]+)' "$file" 2>/dev/null || true)
  if [[ -n $line ]]; then
    sed -E 's/task ([0-9]+): (.*)/rank \1: \2 (srun)/' <<<"$line"
    return
  fi
  line=$(grep -m1 -oE 'process rank [0-9]+ with PID [0-9]+ on node [^ ]+ exited (on signal|with status) [0-9]+' "$file" 2>/dev/null || true)
  [[ -n $line ]] && { echo "$line (mpirun)"; return; }
  echo "the launcher ended with exit code $rc and k3eval recorded no reason"
}

# k3_record_unfinished ARTIFACTS RC: a job that died under the launcher leaves status "running",
# or "failed" with what rank 0 was doing when the launcher terminated it; the wrapper finalizes
# it as "failed" with the launcher's reason first (the lost host and its ranks, or the killed
# rank and its signal), then k3eval's (or, when rank 0 ended without one, its last heartbeat:
# what it was doing a second before), and writes a summary.json saying what finished. It prints
# that reason on stderr and returns 0 when it recorded one (1 when k3eval's record stands).
k3_record_unfinished() {
  local artifacts=$1 rc=$2 reason finished=0 word recorded=""
  [[ -f $artifacts/status ]] || return 1
  word=$(head -n1 "$artifacts/status")
  if [[ $word == failed ]]; then
    recorded=$(sed -n 2p "$artifacts/status")
    [[ $recorded == "terminated by the launcher"* ]] || return 1
  elif [[ $word != running ]]; then
    return 1
  fi
  reason=$(k3_launcher_reason "$artifacts" "$rc")
  if [[ -n $recorded ]]; then
    reason="$reason; $recorded"
  elif [[ -s $artifacts/heartbeat ]]; then
    # Rank 0 ended without a word (an MPI library's own abort, SIGKILL): its last heartbeat.
    local at last
    read -r at last <"$artifacts/heartbeat"
    reason="$reason; rank 0 ended without a record; its last heartbeat ($at): $last"
  fi
  [[ -f $artifacts/questions.jsonl ]] && finished=$(grep -c '}$' "$artifacts/questions.jsonl" || true)
  printf 'failed\n%s\n' "$reason" >"$artifacts/status.tmp" && mv "$artifacts/status.tmp" "$artifacts/status"
  local escaped
  escaped=$(sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' <<<"$reason")
  printf '{\n  "status": "failed",\n  "reason": "%s",\n  "exit_code": %d,\n  "finished_questions": %d,\n  "recorded_by": "launcher wrapper"\n}\n' \
    "$escaped" 3 "$finished" >"$artifacts/summary.json.tmp" && mv "$artifacts/summary.json.tmp" "$artifacts/summary.json"
  echo "k3eval: job failed: $reason" >&2
}
