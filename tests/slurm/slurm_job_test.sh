#!/usr/bin/env bash
# The job scripts of jobs/ as users submit them: jobs/slurm/*.sbatch on the private single-host
# Slurm of tests/slurm/cluster.sh, and jobs/k3eval-mpirun.sh on the local host.
# Usage: slurm_job_test.sh CASE CLUSTER_DIR WORK_DIR K3EVAL K3CKPT
#   checkpoint               writes the synthetic checkpoint the other cases use (a fixture)
#   nightly_gsm8k_8          sbatch -n 8 jobs/slurm/nightly-gsm8k.sbatch: COMPLETED, 0:0, artifacts
#   nightly_gsm8k_failed_8   the same job with an impossible layout: FAILED, non-zero exit code
#   production_64            jobs/slurm/production.sbatch at its 64 tasks (4 simulated nodes of 16)
#   preflight_64             jobs/slurm/preflight.sbatch (--plan-only) at the same shape
#   mpirun_wrapper_8         jobs/k3eval-mpirun.sh --small-host -n 8 with the nightly config
set -uo pipefail
case_name=$1
cluster=$2
work_root=$3
export K3EVAL=$4
k3ckpt=$5
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
checkpoint=$work_root/checkpoint-tiny-hf
work=$work_root/$case_name
export PATH=/usr/sbin:$PATH

failures=0
fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }
finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$case_name: $failures check(s) failed" >&2
    exit 1
  fi
  echo "$case_name: ok"
  exit 0
}

if [[ $case_name == checkpoint ]]; then
  rm -rf "$checkpoint"
  "$k3ckpt" synth --preset tiny --format hf --out "$checkpoint" >/dev/null || fail "k3ckpt synth failed"
  [[ -f $checkpoint/config.json ]] || fail "no config.json in $checkpoint"
  finish
fi
[[ -f $checkpoint/config.json ]] || { echo "no checkpoint in $checkpoint (fixture slurm_checkpoint)" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
cd "$work" || exit 1

# The layout of the 64-rank configs, scaled to 8 tasks: DP attention over 4 groups of 2.
layout_8=(--tp 8 --ep 8)
# A few questions and tokens keep the jobs short on the test cluster.
few_questions=(--num-questions 3 --max-new-tokens 8)

if [[ $case_name == mpirun_wrapper_8 ]]; then
  echo '{"accuracy": 0.0, "tolerance": {"mode": "absolute", "value": 0.0}}' >"$work/reachable.json"
  K3_ARTIFACTS_ROOT=$work/artifacts timeout 120 "$repo/jobs/k3eval-mpirun.sh" --small-host -n 8 \
    "$repo/jobs/configs/nightly-gsm8k.ini" "${layout_8[@]}" --model-path "$checkpoint" \
    "${few_questions[@]}" --baseline "$work/reachable.json" >out 2>err
  rc=$?
  [[ $rc -eq 0 ]] || fail "exit code $rc; stderr: $(cat err)"
  grep -qF "Status: ok" out || fail "stdout lacks the run's status: $(cat out)"
  runs=("$work"/artifacts/*/)
  [[ ${#runs[@]} -eq 1 && -d ${runs[0]} ]] || fail "expected one run directory under $work/artifacts: ${runs[*]}"
  run=${runs[0]%/}
  [[ $(basename "$run") =~ ^[0-9]{8}T[0-9]{6}Z-[0-9]+$ ]] || fail "run directory '$run' is not <UTC time>-<pid>"
  for r in 0 1 2 3 4 5 6 7; do
    [[ -s $run/logs/rank-0000$r.log ]] || fail "missing or empty $run/logs/rank-0000$r.log"
  done
  grep -qx "exit_code: 0" "$run/job.txt" || fail "job.txt lacks 'exit_code: 0': $(cat "$run/job.txt")"
  cmp -s "$run/stdout.log" out || fail "stdout.log differs from the run's stdout"
  finish
fi

# --- Slurm cases ---
# Nothing from an enclosing allocation (a CI job under Slurm) may leak into the submission.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SALLOC_|SRUN_)')
# shellcheck source=/dev/null
source "$cluster/env.sh" || { echo "no cluster in $cluster (fixture slurm_cluster)" >&2; exit 1; }
sinfo -h -o %T | grep -qE 'idle|mixed' || fail "the cluster's node is not up: $(sinfo 2>&1)"

# submit ARGS...: sbatch from $work; sets $job.
submit() {
  job=$(sbatch --parsable --time=5 "$@" 2>"$work/sbatch.err")
  local rc=$?
  job=${job%%;*}
  [[ $rc -eq 0 && $job =~ ^[0-9]+$ ]] || { fail "sbatch failed ($rc): $(cat "$work/sbatch.err")"; finish; }
  echo "submitted job $job: sbatch $*"
}
# show_stuck: what a job that outlived its deadline is doing, for a hang seen once in many runs:
# its processes with their states and the kernel's wait channel of every k3eval thread, and (with
# gdb) the stacks of the first ranks.
show_stuck() {
  local pid t
  echo "--- processes at the deadline ---"
  ps -eo pid,ppid,stat,etimes,wchan:24,args | grep -E '^ *PID|slurmstepd|slurm_script|srun|tee |bin/k3eval' | grep -v grep
  for pid in $(pgrep -x k3eval | head -64); do
    printf 'k3eval %s threads waiting in:' "$pid"
    for t in /proc/"$pid"/task/*; do printf ' %s' "$(cat "$t/wchan" 2>/dev/null)"; done
    echo
  done
  if command -v gdb >/dev/null; then
    for pid in $(pgrep -x k3eval | head -2); do
      timeout 30 gdb -batch -p "$pid" -ex 'thread apply all bt 12' 2>/dev/null | grep -E '^(#|Thread)'
    done
  fi
  echo "---"
}
# wait_job SECONDS: polls the job until it has ended; sets $state, $exit_code and $output (the
# job's output file) from `scontrol show job`, whose record stays MinJobAge=300 s after the end
# (the cluster has no accounting database for sacct).
wait_job() {
  local deadline=$((SECONDS + $1)) info
  while :; do
    info=$(scontrol show job -o "$job" 2>&1)
    state=$(grep -o 'JobState=[A-Z_]*' <<<"$info" | cut -d= -f2)
    exit_code=$(grep -o 'ExitCode=[0-9:]*' <<<"$info" | cut -d= -f2)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) break ;;
    esac
    if ((SECONDS >= deadline)); then
      fail "job $job still '$state' after $1 s: $info"
      show_stuck
      scancel "$job"
      break
    fi
    sleep 0.5
  done
  output=$(grep -o 'StdOut=[^ ]*' <<<"$info" | cut -d= -f2)
  echo "job $job: JobState=$state ExitCode=$exit_code (test time $SECONDS s)"
}
show_output() { echo "--- $output ---"; cat "$output" 2>/dev/null; echo "---"; }

case $case_name in
  nightly_gsm8k_8)
    # The nightly as submitted, on the synthetic checkpoint and a few questions, against a
    # baseline the synthetic model reaches (the config's real one is overridden on the command line).
    echo '{"accuracy": 0.0, "tolerance": {"mode": "absolute", "value": 0.0}}' >"$work/reachable.json"
    submit -n 8 "$repo/jobs/slurm/nightly-gsm8k.sbatch" "${layout_8[@]}" --model-path "$checkpoint" \
      "${few_questions[@]}" --baseline "$work/reachable.json"
    wait_job 240
    [[ $state == COMPLETED ]] || fail "JobState=$state, expected COMPLETED"
    [[ $exit_code == 0:0 ]] || fail "ExitCode=$exit_code, expected 0:0"
    [[ -f $output ]] || fail "no job output $output"
    grep -qF "layout: world=8 tp=8 dp=4 (DP attention) attn_tp=2 ep=8" "$output" || fail "output lacks the 8-task layout"
    # The ranks were started by srun steps of this job, not by a singleton or mpirun: step 0 is
    # the golden canary (the quickstart's 4 simulated ranks per node), step 1 the nightly.
    grep -qF "8 ranks (simulated nodes via slurm), 1 oneTBB thread(s) per rank, job $job.0" "$output" ||
      fail "output does not show the golden canary's 8 ranks in step $job.0"
    grep -qF "8 ranks (hosts via slurm), 1 oneTBB thread(s) per rank, job $job.1" "$output" ||
      fail "output does not show 8 ranks in step $job.1"
    for line in "Accuracy: " "Invalid: " "Latency: " "Output throughput: " "PASS" "Status: ok"; do
      grep -qF -- "$line" "$output" || fail "output lacks '$line'"
    done
    grep -qF "k3eval job $job: exit code 0" "$output" || fail "output lacks the job's exit line"
    artifacts=$work/artifacts/$job
    [[ -d $artifacts ]] || fail "no artifacts directory $artifacts"
    for r in 0 1 2 3 4 5 6 7; do
      f=$artifacts/logs/rank-0000$r.log
      [[ -s $f ]] || { fail "missing or empty $f"; continue; }
      grep -qF "[rank $r/8] [info] 7 group kinds built and verified" "$f" || fail "$f lacks rank $r's info lines"
    done
    cmp -s "$artifacts/config.ini" "$repo/jobs/configs/nightly-gsm8k.ini" || fail "artifacts lack the config used"
    grep -qx "exit_code: 0" "$artifacts/job.txt" || fail "job.txt lacks 'exit_code: 0'"
    grep -qx "tasks: 8" "$artifacts/job.txt" || fail "job.txt lacks 'tasks: 8'"
    [[ $(wc -l <"$artifacts/questions.jsonl") -eq 3 ]] || fail "questions.jsonl lacks the 3 questions"
    [[ $(cat "$artifacts/status") == ok ]] || fail "status file says $(cat "$artifacts/status")"
    [[ -s $artifacts/history.h5 ]] || fail "no history.h5"
    # The golden canary ran first, on 8 tasks of the allocation, and reproduced every token.
    grep -qF "Golden tokens: 20 of 20 completions identical" "$output" || fail "output lacks the golden canary's line"
    [[ $(cat "$artifacts-golden/status" 2>/dev/null) == ok ]] || fail "no golden canary artifacts with status ok in $artifacts-golden"
    ;;
  nightly_throughput_8)
    # The nightly throughput job twice on one history: SGLang's report, a record per
    # night, k3report check against the previous night; then a baseline 100 x above this
    # machine's measured speed: k3eval's verdict fails the job with exit 1.
    export K3_HISTORY=$work/throughput.h5
    small=(--random-input-len 16 --random-output-len 4 --num-prompts 8)
    submit -n 8 "$repo/jobs/slurm/nightly-throughput.sbatch" "${layout_8[@]}" --model-path "$checkpoint" "${small[@]}"
    wait_job 240
    [[ $state == COMPLETED && $exit_code == 0:0 ]] || { show_output; fail "JobState=$state ExitCode=$exit_code, expected COMPLETED 0:0"; }
    for line in "====== Offline Throughput Benchmark Result =======" "Successful requests:                     8" \
                "Total generated tokens:                  32" "Status: ok" \
                "offline throughput runs) ok: output throughput"; do
      grep -qF -- "$line" "$output" || fail "output lacks '$line'"
    done
    first=$job
    K3_TOLERANCE=0.000001 submit -n 8 "$repo/jobs/slurm/nightly-throughput.sbatch" "${layout_8[@]}" \
      --model-path "$checkpoint" "${small[@]}"
    wait_job 240
    [[ $state == COMPLETED ]] || { show_output; fail "second night: JobState=$state"; }
    grep -qE "^check: run 1 \(.*offline throughput runs\) ok: output throughput [0-9.]+ token/s >= [0-9.]+ \(previous run 0: " "$output" ||
      fail "the second night was not checked against the first: $(grep '^check' "$output")"
    machine=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["machine"])' "$work/artifacts/$first/config.json")
    measured=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics"]["output_throughput"])' "$work/artifacts/$first/summary.json")
    python3 -c 'import json, sys; json.dump({"benchmark": "throughput", "output_throughput": 100 * float(sys.argv[2]),
      "tolerance": {"mode": "relative", "value": 0.9}, "machine": sys.argv[1]}, open(sys.argv[3], "w"))' \
      "$machine" "$measured" "$work/high.json"
    submit -n 8 "$repo/jobs/slurm/nightly-throughput.sbatch" "${layout_8[@]}" --model-path "$checkpoint" \
      "${small[@]}" --baseline "$work/high.json"
    wait_job 240
    [[ $state == FAILED && $exit_code == 1:0 ]] || { show_output; fail "JobState=$state ExitCode=$exit_code, expected FAILED 1:0"; }
    grep -qF "REGRESSION" "$output" || fail "the job output lacks the verdict"
    [[ $(cat "$work/artifacts/$job/status") == regression ]] || fail "status file is not 'regression'"
    ;;
  nightly_gsm8k_failed_8)
    # A baseline out of reach for random weights (the config's real one, 0.970 on GSM8K-200,
    # cannot judge 3 questions): k3eval reports the regression and exits 1, so the Slurm job
    # ends FAILED. Also checks that
    # K3_ARTIFACTS_ROOT moves the per-job directory.
    echo '{"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 0.99}}' >"$work/unreachable.json"
    # K3_GOLDEN=0: the golden canary is skipped (nightly_gsm8k_8 runs it).
    K3_GOLDEN=0 K3_ARTIFACTS_ROOT=$work/elsewhere submit -n 8 "$repo/jobs/slurm/nightly-gsm8k.sbatch" \
      "${layout_8[@]}" --model-path "$checkpoint" "${few_questions[@]}" --baseline "$work/unreachable.json"
    wait_job 240
    [[ $state == FAILED ]] || fail "JobState=$state, expected FAILED"
    [[ $exit_code == 1:0 ]] || fail "ExitCode=$exit_code, expected k3eval's regression exit 1:0"
    grep -qF "REGRESSION" "$output" || fail "the job output lacks the verdict"
    grep -qF "Status: regression" "$output" || fail "the job output lacks the status"
    grep -qF "k3eval job $job: exit code 1" "$output" || fail "output lacks the job's exit line"
    grep -qx "exit_code: 1" "$work/elsewhere/$job/job.txt" || fail "no $work/elsewhere/$job/job.txt with 'exit_code: 1'"
    [[ $(cat "$work/elsewhere/$job/status") == regression ]] || fail "status file is not 'regression'"
    [[ ! -e $work/artifacts ]] || fail "K3_ARTIFACTS_ROOT was ignored: $work/artifacts exists"
    [[ ! -e $work/elsewhere/$job-golden ]] || fail "K3_GOLDEN=0 still ran the golden canary"
    ;;
  production_64)
    # The production shape: 64 tasks, TP64 / DP4 / EP64. The test cluster has one node of 64
    # CPUs, so the 16 tasks per node become 64 and k3eval simulates the 4 nodes.
    submit --ntasks-per-node=64 "$repo/jobs/slurm/production.sbatch" --ranks-per-node 16 --model-path "$checkpoint" \
      "${few_questions[@]}" --check-layout
    wait_job 300
    [[ $state == COMPLETED ]] || fail "JobState=$state, expected COMPLETED"
    [[ $exit_code == 0:0 ]] || fail "ExitCode=$exit_code, expected 0:0"
    [[ $output == */k3eval-production-$job.out ]] || fail "unexpected job output name $output"
    for line in "layout: world=64 tp=64 dp=4 (DP attention) attn_tp=16 ep=64 moe_tp=1 nodes=4x16 lm-head=attn-tp dense-mlp=attn-tp shared-experts=attn-tp" \
                "attn-tp              4    16  {0..15} {16..31} {32..47} {48..63}" \
                "attn-dp             16     4  {0,16,32,48} {1,17,33,49}" \
                "moe-ep               1    64  {0..63}" \
                "64 ranks (simulated nodes via slurm), 1 oneTBB thread(s) per rank, job $job.0" \
                "Output throughput: " \
                "Status: ok"; do
      grep -qF -- "$line" "$output" || fail "output lacks '$line'"
    done
    logs=("$work/artifacts/$job"/logs/rank-000??.log)
    [[ ${#logs[@]} -eq 64 && -s ${logs[63]} ]] || fail "expected 64 rank logs in $work/artifacts/$job/logs"
    ;;
  preflight_64)
    # The pre-flight before a production booking: the production shape with --plan-only.
    submit --ntasks-per-node=64 "$repo/jobs/slurm/preflight.sbatch" --ranks-per-node 16 --model-path "$checkpoint"
    wait_job 240
    [[ $state == COMPLETED ]] || fail "JobState=$state, expected COMPLETED"
    [[ $exit_code == 0:0 ]] || fail "ExitCode=$exit_code, expected 0:0"
    grep -qF "layout: world=64 tp=64 dp=4 (DP attention) attn_tp=16 ep=64" "$output" || fail "output lacks the layout"
    grep -qE "^plan-only: [0-9]+ shards, [0-9]+ tensors" "$output" || fail "output lacks the plan-only summary"
    [[ $(grep -c '^rank .* MiB to read from' "$output") -eq 64 ]] || fail "expected 64 rank lines"
    grep -q "shards loaded" "$output" && fail "the pre-flight loaded tensor data"
    ;;
  *)
    fail "unknown case"
    ;;
esac
[[ $failures -eq 0 ]] || show_output
finish
