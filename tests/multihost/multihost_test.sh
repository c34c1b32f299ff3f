#!/usr/bin/env bash
# k3eval across hosts, as a user runs it on several machines: hosts made on this machine by
# tests/multihost/fixture.sh (network namespaces with their own host names, TCP through a bridge),
# mpirun's rsh launcher starting one daemon per host.
#   same_answers      the quickstart's layout on 2 hosts x 4 and 4 hosts x 2 ranks, the nodes found
#                     from the host names: the golden tokens of one host x 8 (the baseline, which
#                     k3eval_eval_golden_quickstart_8 holds one host to) and identical
#                     questions.jsonl; --check-layout says which host holds which groups
#   lost_host_cut     a host's link cut mid-run, under jobs/k3eval-mpirun.sh
#   lost_host_kill    a host's processes (daemon and ranks) killed mid-run, under the wrapper
#   lost_host_stop    a host's ranks stopped (SIGSTOP) mid-run, under the wrapper
#   bare_mpirun_cut   a host's link cut under a bare mpirun: every rank ends on its own, status true
#   slurm_lost_host_cut, slurm_lost_host_kill, slurm_lost_host_stop
#                     the same faults under jobs/slurm/nightly-gsm8k.sbatch on a Slurm cluster whose
#                     nodes are the hosts (srun --mpi=pmix across them); the cut run is resumed
#                     by a second sbatch
# A lost host must end the job on every host within --collective-timeout + 15 s (nothing left: no
# k3eval, orted or mpirun), exit 3, a status naming the host, its ranks, the collective and the
# step, every finished question kept, and --resume on all hosts must finish it with the tokens of
# an uninterrupted run.
#   whole_run         the fault cases' uninterrupted run on one host, which a resumed run must
#                     equal (run once, before them)
# Usage: multihost_test.sh CASE K3EVAL_BINARY WORK_DIR CHECKPOINT_DIR DATA_FILE
set -uo pipefail
case_name=$1
k3eval=$2
work=$3/$case_name
ck=$4
data=$5
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# shellcheck source=tests/multihost/fixture.sh
source "$repo/tests/multihost/fixture.sh"

failures=0
fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }
finish() {
  if [[ $failures -eq 0 ]]; then echo "PASS [$case_name]"; exit 0; fi
  echo "$failures failure(s) in $case_name" >&2
  exit 1
}
# The per-question facts that must not change: "id prediction token_ids", sorted by id.
facts() {
  sed -E 's/^\{"id":([0-9]+),.*"prediction":"([^"]*)".*"token_ids":(\[[^]]*\]).*$/\1 \2 \3/' "$1" | sort -n
}

quickstart=(--config "$repo/jobs/configs/quickstart.ini" --ranks-per-node 0 --model-path "$ck"
            --data-path "$data" --progress log)

# run_hosts HOSTS SLOTS DIR ARGS...: k3eval on HOSTS x SLOTS ranks of this fixture, plain mpirun.
run_hosts() {
  local hosts=$1 slots=$2 dir=$3
  shift 3
  mh_up "$hosts" || { fail "the multi-host fixture could not start (see above)"; finish; }
  mh_slots "$slots"
  timeout 300 mpirun "${MH_MPIRUN_ARGS[@]}" --map-by slot --oversubscribe -np $((hosts * slots)) "$k3eval" \
    "${quickstart[@]}" --artifacts-dir "$dir" "$@" >"$dir.out" 2>"$dir.err"
  rc=$?
  mh_down
}

# The fault scenario's job: 40 questions, so that the fault lands mid-run (the scheduler admits
# them in waves: the first wave's answers are written while the rest are in flight), and a short
# timeout. 32 new tokens, not the quickstart's 64: what is checked is how the job ends and
# resumes, and each run, before the fault and resumed, is one wave shorter in steps.
lost_args=(--num-questions 40 --max-new-tokens 32 --collective-timeout 10)
timeout_s=10

# The uninterrupted run a resumed one must equal (tokens do not depend on the hosts): the
# whole_run case writes it once, on one host, for every fault case (a ctest fixture).
whole=$3/whole_run/whole

# inject_fault FAULT HOST RUNNING...: once some questions of $run_dir are finished (and before
# all are; RUNNING... says the job still runs), cuts, kills or stops HOST; sets $kept_at_fault
# and $fault_at.
inject_fault() {
  local fault=$1 host=$2 i
  shift 2
  for ((i = 0; i < 1200; i++)); do
    [[ -f $run_dir/questions.jsonl && $(wc -l <"$run_dir/questions.jsonl") -ge 3 ]] && break
    "$@" 2>/dev/null || break
    sleep 0.1
  done
  kept_at_fault=$(wc -l <"$run_dir/questions.jsonl" 2>/dev/null || echo 0)
  [[ $kept_at_fault -ge 3 && $kept_at_fault -lt 40 ]] ||
    fail "no fault injected: $kept_at_fault questions finished; $(tail -3 "$work"/*.err "$work"/*.out 2>/dev/null)"
  fault_at=$(date +%s)
  case $fault in
    cut) mh_cut "$host" ;;
    kill) mh_kill "$host" ;;
    stop) mh_stop "$host" ;;
  esac
}

# check_record HOST: $run_dir's status is failed and names HOST, its ranks, the collective and
# the step; every question finished at the fault is kept, each line whole.
check_record() {
  local status kept
  status=$(cat "$run_dir/status")
  [[ $(head -n1 <<<"$status") == failed ]] || fail "status: $status"
  grep -qE "host $1 \(ranks (4-7|\{4\.\.7\})" <<<"$status" || fail "status names no lost host and its ranks: $status"
  grep -qE ' over (world|attn-tp|moe-ep|tp|attn-dp|node)' <<<"$status" || fail "status names no collective: $status"
  grep -qE 'step [0-9]+' <<<"$status" || fail "status names no step: $status"
  echo "status: $status" >&2
  kept=$(wc -l <"$run_dir/questions.jsonl")
  [[ $kept -ge $kept_at_fault ]] || fail "kept $kept questions, $kept_at_fault were finished at the fault"
  [[ $(grep -c '}$' "$run_dir/questions.jsonl") -eq $kept ]] || fail "a cut line in questions.jsonl"
}

# check_resumed: $run_dir holds all 40 questions with the uninterrupted run's tokens.
check_resumed() {
  [[ -f $whole/questions.jsonl ]] ||
    { fail "no uninterrupted run at $whole (the multihost_whole_run test writes it)"; return; }
  facts "$whole/questions.jsonl" >"$work/whole.facts"
  facts "$run_dir/questions.jsonl" >"$work/resumed.facts"
  [[ $(wc -l <"$work/resumed.facts") -eq 40 ]] || fail "resumed run has $(wc -l <"$work/resumed.facts") questions"
  cmp -s "$work/whole.facts" "$work/resumed.facts" ||
    fail "resumed tokens differ from the uninterrupted run's: $(diff "$work/whole.facts" "$work/resumed.facts" | head -4)"
}

case $case_name in
  whole_run)
    mkdir -p "$whole"
    timeout 300 mpirun --oversubscribe -np 8 "$k3eval" "${quickstart[@]}" "${lost_args[@]}" \
      --artifacts-dir "$whole" >"$work/whole.out" 2>"$work/whole.err" ||
      fail "uninterrupted run: $(tail -3 "$work/whole.err")"
    [[ $(facts "$whole/questions.jsonl" | wc -l) -eq 40 ]] ||
      fail "uninterrupted run: $(wc -l <"$whole/questions.jsonl") questions, expected 40"
    ;;
  same_answers)
    # Every token of the 20 completions is checked against the baseline's golden tokens, which a
    # run on one host must give (k3eval_eval_golden_quickstart_8); the shapes' questions.jsonl
    # are compared with each other whole.
    for shape in 2x4 4x2; do
      hosts=${shape%x*}
      slots=${shape#*x}
      run_hosts "$hosts" "$slots" "$work/$shape" --check-layout \
        --baseline "$repo/jobs/baselines/quickstart-tiny.json"
      [[ $rc -eq 0 ]] || fail "$shape: exit code $rc; $(tail -3 "$work/$shape.err")"
      grep -q "nodes=$shape " "$work/$shape.out" || fail "$shape: the layout found no nodes=$shape: $(head -1 "$work/$shape.out")"
      grep -q '^Golden tokens: 20 of 20 completions identical$' "$work/$shape.out" ||
        fail "$shape: golden tokens: $(grep Golden "$work/$shape.out")"
      facts "$work/$shape/questions.jsonl" >"$work/$shape.facts"
      [[ $(wc -l <"$work/$shape.facts") -eq 20 ]] || fail "$shape: $(wc -l <"$work/$shape.facts") questions"
      # --check-layout: each host's ranks and the groups it holds, a group split over hosts
      # marked with how many of its members are there.
      grep -qE "^host k3h[0-9]+n0: ranks \{0\.\.$((slots - 1))\}|^host k3h[0-9]+n0: ranks \{0,1\}" "$work/$shape.out" ||
        fail "$shape: --check-layout names no host with its ranks: $(grep -A3 '^host' "$work/$shape.out" | head -4)"
      grep -qE "^  moe-ep +\{0\.\.7\} \($slots of 8 here\)$" "$work/$shape.out" ||
        fail "$shape: --check-layout does not show moe-ep spanning the hosts: $(grep moe-ep "$work/$shape.out")"
      [[ $(wc -l <"$work/$shape/hosts.txt") -eq $hosts ]] || fail "$shape: hosts.txt: $(cat "$work/$shape/hosts.txt")"
      # The collectives' time per kind of traffic, over the real hosts.
      grep -qE "^Collectives: 8 ranks on $hosts host\(s\)" "$work/$shape.out" ||
        fail "$shape: no Collectives block: $(grep -A9 '^Collectives' "$work/$shape.out")"
      grep -qE '^  EP all-to-all +[0-9.]+ ' "$work/$shape.out" || fail "$shape: no EP all-to-all row"
    done
    cmp -s "$work/2x4.facts" "$work/4x2.facts" ||
      fail "questions.jsonl differs between 2x4 and 4x2: $(diff "$work/2x4.facts" "$work/4x2.facts" | head -5)"
    ;;

  lost_host_cut | lost_host_kill | lost_host_stop | bare_mpirun_cut)
    fault=${case_name##*_}
    mh_up 2 || { fail "the multi-host fixture could not start (see above)"; finish; }
    mh_slots 4
    lost=${MH_HOSTS[1]}
    run_dir=$work/run
    if [[ $case_name == bare_mpirun_cut ]]; then
      mkdir -p "$run_dir"
      mpirun "${MH_MPIRUN_ARGS[@]}" --map-by slot --oversubscribe -np 8 "$k3eval" "${quickstart[@]}" "${lost_args[@]}" \
        --artifacts-dir "$run_dir" >"$work/run.out" 2>"$work/run.err" &
    else
      K3EVAL=$k3eval K3_ARTIFACTS_DIR=$run_dir K3_MPIRUN_ARGS="${MH_MPIRUN_ARGS[*]}" \
        "$repo/jobs/k3eval-mpirun.sh" --small-host -n 8 "$repo/jobs/configs/quickstart.ini" \
        "${quickstart[@]:2}" "${lost_args[@]}" >"$work/run.out" 2>"$work/run.err" &
    fi
    job=$!
    inject_fault "$fault" "$lost" kill -0 "$job"
    # Every k3eval rank that can act must be gone in time; with the wrapper, everything.
    deadline=$((fault_at + timeout_s + 15))
    while [[ $(date +%s) -le $deadline ]]; do
      if [[ $case_name == bare_mpirun_cut ]]; then
        [[ -z $(mh_ranks_alive) ]] && break
      else
        kill -0 "$job" 2>/dev/null || break
      fi
      sleep 0.5
    done
    ended_after=$(($(date +%s) - fault_at))
    if [[ $case_name == bare_mpirun_cut ]]; then
      left=$(mh_ranks_alive)
      [[ -z $left ]] || fail "k3eval ranks still alive $ended_after s after the cut: $left"
      kill -KILL "$job" 2>/dev/null  # mpirun itself waits for the lost daemon: expected
      wait "$job" 2>/dev/null
    else
      if kill -0 "$job" 2>/dev/null; then
        fail "the job still runs $ended_after s after the fault (--collective-timeout $timeout_s)"
        kill -KILL "$job" 2>/dev/null
      fi
      wait "$job"
      rc=$?
      [[ $rc -eq 3 ]] || fail "exit code $rc, expected 3; $(tail -3 "$work/run.err")"
      # The cut-off host's daemon learns of the loss by its own keepalive, a little after
      # mpirun does: it has until the same deadline.
      while [[ -n $(mh_leftovers) && $(date +%s) -le $deadline ]]; do sleep 0.5; done
      left=$(mh_leftovers)
      [[ -z $left ]] || fail "left $(($(date +%s) - fault_at)) s after the fault (--collective-timeout $timeout_s): $left"
      [[ $(grep -c '^k3eval: job failed: \|collective timeout: ' "$work/run.err") -ge 1 ]] ||
        fail "no message says why the job ended: $(tail -5 "$work/run.err")"
    fi
    echo "$case_name: the job ended $ended_after s after the fault" >&2
    check_record "$lost"
    # --resume on the full set of hosts completes the run with the uninterrupted run's tokens.
    mh_down
    mh_up 2 || { fail "the multi-host fixture could not start again"; finish; }
    mh_slots 4
    K3EVAL=$k3eval K3_ARTIFACTS_DIR=$run_dir K3_MPIRUN_ARGS="${MH_MPIRUN_ARGS[*]}" timeout 300 \
      "$repo/jobs/k3eval-mpirun.sh" --small-host -n 8 "$repo/jobs/configs/quickstart.ini" \
      "${quickstart[@]:2}" "${lost_args[@]}" --resume >"$work/resume.out" 2>"$work/resume.err"
    rc=$?
    [[ $rc -eq 0 ]] || fail "--resume: exit code $rc; $(tail -3 "$work/resume.err")"
    check_resumed
    ;;
  slurm_lost_host_cut | slurm_lost_host_kill | slurm_lost_host_stop)
    fault=${case_name##*_}
    # Nothing from an enclosing allocation may leak into the submission.
    while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SALLOC_|SRUN_)')
    export PATH=/usr/sbin:$PATH
    run_dir=$work/run
    # submit_nightly ARGS...: the nightly sbatch script as the quickstart's job on both nodes;
    # sets $job.
    submit_nightly() {
      job=$(cd "$work" && K3_GOLDEN=0 K3_CONFIG=$repo/jobs/configs/quickstart.ini K3_ARTIFACTS_DIR=$run_dir \
        K3EVAL=$k3eval sbatch --parsable -N 2 -n 8 --ntasks-per-node=4 --time=5 \
        "$repo/jobs/slurm/nightly-gsm8k.sbatch" "${quickstart[@]:2}" "${lost_args[@]}" "$@" 2>"$work/sbatch.err")
      job=${job%%;*}
      [[ $job =~ ^[0-9]+$ ]] || { fail "sbatch failed: $(cat "$work/sbatch.err")"; finish; }
    }
    # ended: the sbatch script's wrapper has recorded the end (a node cut off keeps the Slurm
    # job COMPLETING until SlurmdTimeout, which is Slurm's bookkeeping, not the job).
    ended() { grep -q '^exit_code:' "$run_dir/job.txt" 2>/dev/null; }
    running() { ! ended; }
    mh_up 2 || { fail "the multi-host fixture could not start (see above)"; finish; }
    mh_slurm_up "$work/cluster" 4 || { fail "the Slurm cluster could not start (see above)"; finish; }
    lost=${MH_HOSTS[1]}
    submit_nightly
    inject_fault "$fault" "$lost" running
    deadline=$((fault_at + timeout_s + 15))
    while [[ $(date +%s) -le $deadline ]]; do
      ended && [[ -z $(mh_ranks_alive) ]] && break
      sleep 0.5
    done
    ended_after=$(($(date +%s) - fault_at))
    ended || fail "the sbatch script still runs $ended_after s after the fault (--collective-timeout $timeout_s)"
    left=$(mh_ranks_alive)
    [[ -z $left ]] || fail "k3eval ranks still alive $ended_after s after the fault: $left"
    [[ -z $(pgrep -f -- "srun .*--artifacts-dir $run_dir") ]] || fail "srun still runs after the job ended"
    grep -qx 'exit_code: 3' "$run_dir/job.txt" || fail "job.txt: $(cat "$run_dir/job.txt")"
    echo "$case_name: the job ended $ended_after s after the fault" >&2
    check_record "$lost"
    if [[ $fault == cut ]]; then
      # --resume by a second submission on both nodes completes the run with the uninterrupted
      # run's tokens.
      mh_down
      mh_up 2 || { fail "the multi-host fixture could not start again"; finish; }
      mh_slurm_up "$work/cluster" 4 || { fail "the Slurm cluster could not start again"; finish; }
      rm -f "$run_dir/job.txt"
      submit_nightly --resume
      for ((i = 0; i < 600; i++)); do ended && break; sleep 0.5; done
      grep -qx 'exit_code: 0' "$run_dir/job.txt" || fail "--resume: $(cat "$run_dir/job.txt"; tail -5 "$work"/*"$job".out)"
      check_resumed
    fi
    ;;
  *)
    fail "unknown case"
    ;;
esac
finish
