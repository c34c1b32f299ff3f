#!/usr/bin/env bash
# The GSM8K evaluation end to end, as a user runs it: reports and artifacts, identical results
# across layouts, a run killed halfway and resumed, baseline verdicts and their exit codes, bad
# data, `logits`, `score` and --mode throughput.
# Usage: k3eval_eval_test.sh CASE K3EVAL_BINARY WORK_DIR CHECKPOINT_DIR DATA_FILE
set -uo pipefail
case_name=$1
k3eval=$2
work=$3/$case_name
ck=$4
data=$5
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

failures=0
fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }

# run NP ARGS...: k3eval on NP ranks; fills $rc, $out, $err. A one-rank job has no rank left to
# terminate once its rank exits, yet after a non-zero exit Open MPI waits out the SIGTERM-to-
# SIGKILL grace twice (2 s by default): these cases' many refusals skip that wait.
run() {
  local np=$1; shift
  local grace=()
  [[ $np -eq 1 ]] && grace=(--mca odls_base_sigkill_timeout 0)
  timeout -k 10 300 mpirun --oversubscribe "${grace[@]}" -np "$np" "$k3eval" "$@" >"$work/out" 2>"$work/err"
  rc=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
}
expect_rc() { [[ $rc -eq $1 ]] || fail "exit code $rc, expected $1; stderr: $(tail -5 "$work/err")"; }
expect_out() { grep -qE -- "$1" <<<"$out" || fail "stdout lacks /$1/; stdout: $out"; }
expect_err() { grep -qF -- "$1" <<<"$err" || fail "stderr lacks '$1'; stderr: $(tail -5 "$work/err")"; }
# The per-question facts that must not change: "id prediction token_ids", sorted by id.
facts() {
  sed -E 's/^\{"id":([0-9]+),.*"prediction":"([^"]*)".*"token_ids":(\[[^]]*\]).*$/\1 \2 \3/' "$1" | sort -n
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
layout8=(--tp 8 --dp 2 --ep 8 --enable-dp-attention --enable-dp-lm-head)
layout64=(--tp 64 --dp 4 --ep 64 --enable-dp-attention --enable-dp-lm-head
          --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp --ranks-per-node 16)
common=(--model-path "$ck" --data-path "$data" --progress log)

case $case_name in
  report_1)
    # --progress auto with mpirun's output in a file: plain lines, no carriage return, although
    # Open MPI hands the rank a pseudo-terminal.
    run 1 --model-path "$ck" --data-path "$data" --num-questions 2 --max-new-tokens 8
    expect_rc 0
    ! grep -q $'\r' "$work/out" "$work/err" || fail "a carriage return in redirected output: $(cat -A "$work/err" | grep -m2 '\^M')"
    run 1 "${common[@]}" --num-questions 3 --max-new-tokens 12 --artifacts-dir "$work/a"
    expect_rc 0
    expect_out '^Accuracy: [0-9]\.[0-9]{3}$'
    expect_out '^Invalid: [0-9]\.[0-9]{3}$'
    expect_out '^Latency: [0-9]+\.[0-9]{3} s$'
    expect_out '^Output throughput: [0-9]+\.[0-9]{3} token/s$'
    expect_out '^Status: ok$'
    [[ $(wc -l <"$work/a/questions.jsonl") -eq 3 ]] || fail "questions.jsonl: $(cat "$work/a/questions.jsonl")"
    [[ $(cat "$work/a/status") == ok ]] || fail "status file: $(cat "$work/a/status")"
    grep -q '"accuracy"' "$work/a/summary.json" || fail "summary.json: $(cat "$work/a/summary.json")"
    # results.json in lm-evaluation-harness's shape: the gsm8k task's two filters, counts, config.
    python3 - "$work/a/results.json" "$ck" <<'PY' || fail "results.json: $(head -c 600 "$work/a/results.json")"
import json, sys
r = json.load(open(sys.argv[1]))
g = r["results"]["gsm8k"]
for f in ("strict-match", "flexible-extract"):
    assert 0 <= g["exact_match," + f] <= 1, g
    assert isinstance(g["exact_match_stderr," + f], float), g
assert r["n-samples"]["gsm8k"] == {"original": 3, "effective": 3}, r["n-samples"]
assert r["n-shot"]["gsm8k"] == 5 and r["configs"]["gsm8k"]["num_fewshot"] == 5
assert r["configs"]["gsm8k"]["generation_kwargs"]["max_gen_toks"] == 12
assert r["config"]["model_args"] == "pretrained=" + sys.argv[2], r["config"]
assert r["higher_is_better"]["gsm8k"]["exact_match"] is True
PY
    # Counts that add up: completion_tokens is token_ids plus a final stop token, which
    # finish_reason names (and k3eval score re-reads every line with that check).
    python3 - "$work/a/questions.jsonl" <<'PY' || fail "completion_tokens and token_ids disagree"
import json, sys
for line in open(sys.argv[1]):
    q = json.loads(line)
    extra = 1 if q["finish_reason"] == "stop_token" else 0
    assert q["finish_reason"] in ("length", "stop_token", "stop_string"), q["finish_reason"]
    assert q["completion_tokens"] == len(q["token_ids"]) + extra, q
PY
    grep -qF -- "--num-questions 3" "$work/a/command.txt" || fail "command.txt"
    [[ -s $work/a/logs/rank-00000.log ]] || fail "no rank log"
    h5dump -H "$work/a/history.h5" >"$work/h5" 2>&1 || fail "h5dump failed: $(head "$work/h5")"
    grep -q 'GROUP "runs"' "$work/h5" || fail "history.h5 has no runs group: $(head -20 "$work/h5")"
    accuracy=$(grep '^Accuracy' "$work/out")
    # Re-scoring the run's own completions gives its accuracy back.
    timeout 60 "$k3eval" score --data-path "$data" --completions "$work/a/questions.jsonl" >"$work/score" 2>&1 \
      || fail "score failed: $(cat "$work/score")"
    grep -qxF "$accuracy" "$work/score" || fail "score says $(cat "$work/score"), the run said $accuracy"
    ;;
  layouts_1_8_64)
    # fp32 activations: see docs/ENGINE.md ("Determinism") for why int8 activations are compared
    # across layouts within 1 % (numerics_8), not token for token.
    args=("${common[@]}" --num-questions 5 --max-new-tokens 10 --fp32-activations)
    run 1 "${args[@]}" --artifacts-dir "$work/one"
    expect_rc 0
    run 8 "${args[@]}" "${layout8[@]}" --artifacts-dir "$work/eight"
    expect_rc 0
    run 64 "${args[@]}" "${layout64[@]}" --artifacts-dir "$work/sixtyfour"
    expect_rc 0
    facts "$work/one/questions.jsonl" >"$work/f1"
    facts "$work/eight/questions.jsonl" >"$work/f8"
    facts "$work/sixtyfour/questions.jsonl" >"$work/f64"
    [[ $(wc -l <"$work/f1") -eq 5 ]] || fail "one rank: $(cat "$work/f1")"
    cmp -s "$work/f1" "$work/f8" || fail "8 ranks differ from 1: $(diff "$work/f1" "$work/f8")"
    cmp -s "$work/f1" "$work/f64" || fail "64 ranks differ from 1: $(diff "$work/f1" "$work/f64")"
    # Both DP groups of the 8-rank run evaluated questions.
    grep -q '"dp_group":1' "$work/eight/questions.jsonl" || fail "DP group 1 evaluated nothing"
    # The generation line counts every DP group: its tokens are the questions' completion tokens.
    generated=$(grep -o '[0-9]* tokens generated' <<<"$err" | cut -d' ' -f1)
    listed=$(python3 -c 'import json, sys; print(sum(json.loads(l)["completion_tokens"] for l in open(sys.argv[1])))' \
      "$work/sixtyfour/questions.jsonl")
    [[ -n $generated && $generated -eq $listed ]] || fail "generation line says '$generated' tokens, questions.jsonl $listed"
    ;;
  batch_invariance_8)
    # A question's tokens do not depend on what shares its batch, its DP group or its place in
    # the queue: the first 4 of 12 questions all in flight at once, and alone one at a
    # time, in the default int8-activation mode; prompt chunks split unevenly (48 tokens).
    # hf (int8 activations in the MXFP4 experts) and GGUF (in every product).
    for model in "$ck" "$(dirname "$ck")/tiny-gguf"; do
    rm -rf "$work/together" "$work/alone"
    args=(--model-path "$model" --data-path "$data" --progress log "${layout8[@]}"
          --max-new-tokens 12 --chunked-prefill-size 48)
    run 8 "${args[@]}" --num-questions 12 --max-running-requests 16 --artifacts-dir "$work/together"
    expect_rc 0
    run 8 "${args[@]}" --num-questions 4 --max-running-requests 1 --artifacts-dir "$work/alone"
    expect_rc 0
    facts "$work/together/questions.jsonl" | head -n 4 >"$work/ft"
    facts "$work/alone/questions.jsonl" >"$work/fa"
    [[ $(wc -l <"$work/fa") -eq 4 ]] || fail "$model alone: $(cat "$work/fa")"
    cmp -s "$work/ft" "$work/fa" || fail "$model: batched and alone differ: $(diff "$work/ft" "$work/fa")"
    done
    ;;
  resume_8)
    # Both activation modes: a resumed run's tokens are the uninterrupted run's, bit for bit.
    for mode in int8 fp32; do
    mode_args=(); [[ $mode == fp32 ]] && mode_args=(--fp32-activations)
    rm -rf "$work/whole" "$work/cut"
    args=("${common[@]}" "${layout8[@]}" --num-questions 8 --max-new-tokens 10 "${mode_args[@]}"
          --max-running-requests 2)
    run 8 "${args[@]}" --artifacts-dir "$work/whole"
    expect_rc 0
    run 8 "${args[@]}" --artifacts-dir "$work/cut" --debug-abort-after 3
    [[ $rc -ne 0 ]] || fail "the injected abort exited 0"
    [[ $(wc -l <"$work/cut/questions.jsonl") -eq 3 ]] || fail "kept $(wc -l <"$work/cut/questions.jsonl") lines, expected 3"
    # Killed in the middle of a line: the partial line is dropped with a warning.
    printf '{"id":7,"dp_gr' >>"$work/cut/questions.jsonl"
    run 8 "${args[@]}" --artifacts-dir "$work/cut" --resume
    expect_rc 0
    expect_err "--resume: 3 of 8 questions already finished"
    expect_err "questions.jsonl:4: dropped the last line, cut short"
    facts "$work/whole/questions.jsonl" >"$work/fw"
    facts "$work/cut/questions.jsonl" >"$work/fc"
    [[ $(wc -l <"$work/fc") -eq 8 ]] || fail "resumed file has $(wc -l <"$work/fc") questions: $(cat "$work/fc")"
    cmp -s "$work/fw" "$work/fc" || fail "$mode: resumed results differ: $(diff "$work/fw" "$work/fc")"
    expect_out '^Status: ok$'
    # Latency and throughput are this part's, and say so; the history marks the resumed run.
    expect_out '^Resumed: 3 of 8 questions were finished before this part; Latency and Output throughput cover this part.s 5 questions'
    grep -q '"finished_before": 3' "$work/cut/summary.json" || fail "summary.json lacks the resume block"
    done
    ;;
  faults_8)
    # A rank killed by a signal mid-run, under the mpirun wrapper: the job ends at once, its
    # status says failed with the rank and the signal, and every rank's log kept its lines.
    printf 'tp = 8\ndp = 2\nep = 8\nenable-dp-attention = true\nnum-questions = 4\nmax-new-tokens = 4\n' >"$work/job.ini"
    start=$(date +%s)
    K3EVAL=$k3eval K3_ARTIFACTS_DIR="$work/killed" timeout 120 "$repo/jobs/k3eval-mpirun.sh" --small-host -n 8 \
      "$work/job.ini" "${common[@]}" --debug-kill-rank 3 >"$work/out" 2>"$work/err"
    rc=$?
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "killed rank: wrapper exit $rc"
    [[ $(( $(date +%s) - start )) -le 90 ]] || fail "the job outlived its killed rank by minutes"
    [[ $(head -n1 "$work/killed/status") == failed ]] || fail "status: $(cat "$work/killed/status")"
    grep -qE '^rank 3 .*signal 9' "$work/killed/status" || fail "status names no rank and signal: $(cat "$work/killed/status")"
    grep -q '"status": "failed"' "$work/killed/summary.json" || fail "summary.json: $(cat "$work/killed/summary.json")"
    for r in 0 3 7; do
      [[ -s $work/killed/logs/rank-0000$r.log ]] || fail "logs/rank-0000$r.log is empty"
    done
    grep -q 'injected SIGKILL' "$work/killed/logs/rank-00003.log" || fail "rank 3's last line was lost"
    # Rank 0 itself killed (as Open MPI's own abort on a reset connection ends it, without a
    # word): the status keeps its last heartbeat, what it was doing a second before.
    K3EVAL=$k3eval K3_ARTIFACTS_DIR="$work/killed0" timeout 120 "$repo/jobs/k3eval-mpirun.sh" --small-host -n 8 \
      "$work/job.ini" "${common[@]}" --debug-kill-rank 0 >"$work/out" 2>"$work/err"
    rc=$?
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "killed rank 0: wrapper exit $rc"
    grep -qE '^rank 0 .*signal 9.*; rank 0 ended without a record; its last heartbeat \(20[0-9-]+T[0-9:]+Z\): rank 0 .*(had waited|was outside)' \
      "$work/killed0/status" || fail "killed rank 0: status keeps no heartbeat: $(cat "$work/killed0/status")"
    # A stopped rank (a hung node): the watchdog ends the job, naming it, and no rank outlives it.
    start=$(date +%s)
    run 8 "${common[@]}" "${layout8[@]}" --num-questions 4 --max-new-tokens 4 --collective-timeout 5 \
      --debug-stop-rank 3 --artifacts-dir "$work/stopped"
    elapsed=$(( $(date +%s) - start ))
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "stopped rank: exit $rc"
    [[ $elapsed -le 40 ]] || fail "stopped rank: the job took $elapsed s with --collective-timeout 5"
    expect_err "collective timeout: rank"
    expect_err "did not arrive: rank 3 (silent for"
    pgrep -f -- "--debug-stop-rank 3" >/dev/null && fail "a rank of the stopped job is still alive"
    # A rank that hangs on its way out, as one hung in MPI_Finalize would, holds every other rank
    # in MPI_Finalize: once the status is written, --exit-timeout ends them all, the results kept.
    start=$(date +%s)
    run 8 "${common[@]}" "${layout8[@]}" --num-questions 2 --max-new-tokens 4 --exit-timeout 3 \
      --debug-hang-at-exit 3 --artifacts-dir "$work/hung-exit"
    elapsed=$(( $(date +%s) - start ))
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "a rank hung on its way out: the job did not end"
    [[ $elapsed -le 40 ]] || fail "a rank hung on its way out: the job took $elapsed s with --exit-timeout 3"
    [[ $(cat "$work/hung-exit/status") == ok ]] || fail "hung exit: status $(cat "$work/hung-exit/status")"
    [[ $(wc -l <"$work/hung-exit/questions.jsonl") -eq 2 ]] || fail "hung exit: the results were not kept"
    grep -q 'injected hang on the way out' "$work/hung-exit/logs/rank-00003.log" || fail "rank 3 did not hang"
    # Rank 0 leaves first, by MPI_Abort, and says why; mpirun then ends the others (rank 3 may log
    # its SIGTERM, unless mpirun's SIGKILL comes first).
    grep -q "has not finished in 3 s (--exit-timeout); the rank exits with code 0" \
      "$work/hung-exit/logs/rank-00000.log" ||
      fail "rank 0's log does not say why it ended: $(tail -2 "$work/hung-exit/logs/rank-00000.log")"
    pgrep -f -- "--debug-hang-at-exit 3" >/dev/null && fail "a rank of the hung-exit job is still alive"
    # An error k3eval sees itself: rank 0 records it, with the rank and the message. (Rank 0
    # alone: when every rank fails outside a collective, another rank's abort may end rank 0
    # before it has written, and then only a launcher wrapper can record the failure.)
    run 2 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/failed" --debug-fail-rank 0
    [[ $rc -eq 3 ]] || fail "injected failure: exit $rc"
    [[ $(head -n1 "$work/failed/status") == failed ]] || fail "status: $(cat "$work/failed/status")"
    grep -q '^rank 0: injected failure' "$work/failed/status" || fail "status: $(cat "$work/failed/status")"
    # A failure every rank reports through a collective: rank 0 records the reporting rank's.
    run 2 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/bad-shots" --num-shots 100000
    expect_rc 2
    [[ $(head -n1 "$work/bad-shots/status") == failed ]] || fail "status: $(cat "$work/bad-shots/status")"
    grep -q '^rank 0: ' "$work/bad-shots/status" || fail "status names no rank: $(cat "$work/bad-shots/status")"
    grep -q '"exit_code": 2' "$work/bad-shots/summary.json" || fail "summary.json: $(cat "$work/bad-shots/summary.json")"
    grep -q '"finished_questions": 0' "$work/failed/summary.json" || fail "summary.json: $(cat "$work/failed/summary.json")"
    # --resume refuses every changed option that defines the results, naming each.
    run 1 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/r"
    expect_rc 0
    [[ $(cat "$work/r/status") == ok ]] || fail "status after a clean run: $(cat "$work/r/status")"
    run 1 "${common[@]}" --num-questions 2 --max-new-tokens 5 --num-shots 3 --temperature 0.5 \
      --answer-extractor flexible --artifacts-dir "$work/r" --resume
    expect_rc 2
    expect_err "--max-new-tokens: 4 in the run being resumed, 5 now"
    expect_err "--num-shots: 5 in the run being resumed, 3 now"
    expect_err "--temperature: 0.0 in the run being resumed, 0.5 now"
    expect_err '--answer-extractor: "sglang" in the run being resumed, "flexible" now'
    run 1 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/r" --resume
    expect_rc 0
    # Two jobs never write one directory: a held lock refuses the second, naming the holder.
    # This shell holds it (no holder process: a background one would outlive the test and keep
    # ctest waiting on its output).
    exec {lock_fd}>>"$work/r/.lock"
    flock -n "$lock_fd" || fail "the test could not take $work/r/.lock"
    echo $$ >"$work/r/.lock"
    run 1 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/r"
    expect_rc 2
    expect_err "is in use by another job (pid $$)"
    exec {lock_fd}>&-
    run 1 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/r"
    expect_rc 0
    ;;
  baseline_1)
    args=("${common[@]}" --num-questions 2 --max-new-tokens 4)
    echo '{"accuracy": 0.0, "tolerance": {"mode": "absolute", "value": 0.0}}' >"$work/pass.json"
    run 1 "${args[@]}" --baseline "$work/pass.json" --artifacts-dir "$work/p"
    expect_rc 0
    expect_out 'PASS'
    # Golden completions: question 0's tokens from the run above must come back exactly.
    tokens=$(sed -nE 's/^\{"id":0,.*"token_ids":(\[[^]]*\]).*$/\1/p' "$work/p/questions.jsonl")
    [[ -n $tokens ]] || fail "no token ids for question 0"
    echo "{\"accuracy\": 0.0, \"tolerance\": {\"mode\": \"absolute\", \"value\": 0.0}, \"golden\": [{\"id\": 0, \"token_ids\": $tokens}]}" >"$work/golden.json"
    run 1 "${args[@]}" --baseline "$work/golden.json" --artifacts-dir "$work/g"
    expect_rc 0
    expect_out 'PASS'
    altered=$(sed -E 's/\[([0-9]+)/[\1999/' <<<"$tokens")
    echo "{\"accuracy\": 0.0, \"tolerance\": {\"mode\": \"absolute\", \"value\": 0.0}, \"golden\": [{\"id\": 0, \"token_ids\": $altered}]}" >"$work/golden-bad.json"
    run 1 "${args[@]}" --baseline "$work/golden-bad.json" --artifacts-dir "$work/gb"
    expect_rc 1
    expect_out '1 of 1 golden completions differ'
    expect_out '^Golden tokens: 0 of 1 completions identical$'
    echo '{"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 0.99}}' >"$work/high.json"
    run 1 "${args[@]}" --baseline "$work/high.json" --artifacts-dir "$work/r"
    expect_rc 1
    expect_out 'REGRESSION'
    expect_out '^Status: regression$'
    [[ $(cat "$work/r/status") == regression ]] || fail "status file: $(cat "$work/r/status")"
    echo '{"accuracy": "high"}' >"$work/bad.json"
    run 1 "${args[@]}" --baseline "$work/bad.json" --artifacts-dir "$work/e"
    expect_rc 2
    expect_err "$work/bad.json"
    grep -q "shards loaded\|planned in" "$work/err" && fail "a malformed baseline was found only after loading"
    ;;
  golden_quickstart_8)
    # The quickstart's golden tokens: jobs/configs/quickstart.ini on 8 ranks against
    # jobs/baselines/quickstart-tiny.json; the fixture holds the same weights in 3 shards.
    run 8 --config "$repo/jobs/configs/quickstart.ini" --model-path "$ck" --data-path "$data" \
      --progress log --baseline "$repo/jobs/baselines/quickstart-tiny.json" --artifacts-dir "$work/q"
    expect_rc 0
    expect_out '^Golden tokens: 20 of 20 completions identical$'
    expect_out 'PASS'
    ;;
  speculative_8)
    # Speculative decoding with the synthetic DSpark draft. Default mode: the
    # quickstart's golden tokens on its 8-rank layout, with the accept length in the log, the
    # summary and summary.json. fp32 activations: every question's tokens identical with and
    # without speculation at 1 rank and on 8. Throughput mode reports it too, and impossible
    # combinations are refused naming their options.
    draft=$(dirname "$ck")/tiny-draft
    spec=(--speculative-algorithm dspark --speculative-draft-model-path "$draft")
    run 8 --config "$repo/jobs/configs/quickstart.ini" --model-path "$ck" --data-path "$data" \
      --progress log --baseline "$repo/jobs/baselines/quickstart-tiny.json" \
      --artifacts-dir "$work/q" "${spec[@]}"
    expect_rc 0
    expect_out '^Golden tokens: 20 of 20 completions identical$'
    # The policy may decode every request plainly on a host where drafting does not pay: the
    # accept length is then "-"; the fixed-length runs below check real rounds.
    expect_out '^Accept length: ([0-9.]+|-)$'
    expect_out '^Speculative decoding: dspark, block size 7: [0-9]+ verify rounds'
    grep -qF 'speculative decoding: dspark, block size 7 (verify width up to 8)' <<<"$out$err" ||
      fail "no speculative decoding log line"
    grep -qF 'drafts verified per round: chosen per request and step by goodput' <<<"$out$err" ||
      fail "no draft-length policy in the log"
    expect_out '^Draft lengths \(goodput\): K=[0-9]+ [0-9]+'
    expect_out '^Decode time: [0-9.]+ s; decoding plainly, by the cost model: [0-9.]+ s \((saved|lost) '
    python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["speculative"]
assert s["algorithm"] == "dspark" and s["block_size"] == 7, s
assert (s["accept_length"] is None) == (s["verify_rounds"] == 0), s
assert s["accept_length"] is None or s["accept_length"] >= 1, s
assert s["policy"] == "goodput" and s["draft_lengths"] and s["plain_estimate_s"] > 0, s' "$work/q/summary.json" ||
      fail "summary.json: $(cat "$work/q/summary.json")"
    # The step costs measured there are kept in the artifacts directory: the same job again
    # restores them instead of measuring (golden tokens unchanged); --speculative-recalibrate
    # measures anyway; a damaged file is measured over with a warning naming it.
    grep -qF 'speculation: step costs measured for a batch of 10' <<<"$err" ||
      fail "the first run measured no step costs: $(grep speculation: "$work/err")"
    python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
assert f["key"]["layout"].startswith("world=8 "), f["key"]
assert f["target"] and f["draft"] and all(x >= 1 and s > 0 for x, s in f["target"] + f["draft"]), f' \
      "$work/q/speculation-costs.json" || fail "speculation-costs.json: $(head -c 400 "$work/q/speculation-costs.json")"
    quickstart=(--config "$repo/jobs/configs/quickstart.ini" --model-path "$ck" --data-path "$data"
                --progress log --baseline "$repo/jobs/baselines/quickstart-tiny.json"
                --artifacts-dir "$work/q" "${spec[@]}")
    run 8 "${quickstart[@]}"
    expect_rc 0
    expect_out '^Golden tokens: 20 of 20 completions identical$'
    expect_err "speculation: step costs for batches up to 10 restored from $work/q/speculation-costs.json"
    ! grep -qF 'step costs measured' "$work/err" || fail "costs measured again although kept"
    run 8 "${quickstart[@]}" --speculative-recalibrate
    expect_rc 0
    expect_err 'speculation: step costs measured for a batch of 10'
    echo '{"key": 3' >"$work/q/speculation-costs.json"
    run 8 "${quickstart[@]}"
    expect_rc 0
    expect_err "$work/q/speculation-costs.json: not a JSON object; measuring the step costs again"
    expect_err 'speculation: step costs measured for a batch of 10'
    # Another job in the same directory (any option differs: here the unused seed of greedy
    # decoding) measures its own.
    run 8 "${quickstart[@]}" --seed 1
    expect_rc 0
    expect_err 'speculation: step costs measured for a batch of 10'
    ! grep -qF 'restored from' "$work/err" || fail "another job's step costs restored"
    args=("${common[@]}" --num-questions 6 --max-new-tokens 24 --fp32-activations)
    for np in 1 8; do
      layout=()
      [[ $np -eq 8 ]] && layout=("${layout8[@]}")
      run "$np" "${args[@]}" "${layout[@]}" --artifacts-dir "$work/plain$np"
      expect_rc 0
      run "$np" "${args[@]}" "${layout[@]}" "${spec[@]}" --artifacts-dir "$work/spec$np"
      expect_rc 0
      facts "$work/plain$np/questions.jsonl" >"$work/fp$np"
      facts "$work/spec$np/questions.jsonl" >"$work/fs$np"
      [[ $(wc -l <"$work/fp$np") -eq 6 ]] || fail "$np rank(s), plain: $(cat "$work/fp$np")"
      cmp -s "$work/fp$np" "$work/fs$np" ||
        fail "$np rank(s): speculative tokens differ: $(diff "$work/fp$np" "$work/fs$np")"
      # A fixed draft length (none at all on one rank: plain decode rows beside the drafter).
      fixed=$((np == 1 ? 0 : 3))
      run "$np" "${args[@]}" "${layout[@]}" "${spec[@]}" --speculative-num-draft-tokens "$fixed" \
        --artifacts-dir "$work/fixed$np"
      expect_rc 0
      # (K=$fixed for every row but those near a request's end, which can use fewer drafts)
      expect_out "^Draft lengths \\(fixed\\): (.*, )?K=$fixed [0-9]+\$"
      facts "$work/fixed$np/questions.jsonl" >"$work/ff$np"
      cmp -s "$work/fp$np" "$work/ff$np" ||
        fail "$np rank(s), K=$fixed: tokens differ: $(diff "$work/fp$np" "$work/ff$np")"
    done
    run 2 --model-path "$ck" --mode throughput --dataset-name random --random-input-len 32 \
      --random-output-len 32 --num-prompts 4 --progress log --tp 2 --dp 2 --ep 2 \
      --enable-dp-attention --enable-dp-lm-head "${spec[@]}" --speculative-num-draft-tokens 7 \
      --artifacts-dir "$work/t"
    expect_rc 0
    expect_out 'Accept length: +[0-9.]+'
    expect_out 'Draft lengths \(fixed\): +(.*, )?K=7 [0-9]+'
    grep -qE 'accept len [0-9.]+, accept rate [0-9.]+' <<<"$out$err" || fail "no accept len in the log"
    # Refusals, each naming its options.
    run 1 "${common[@]}" --speculative-algorithm eagle --speculative-draft-model-path "$draft"
    expect_rc 2
    expect_err "--speculative-algorithm 'eagle' is not supported (dspark is)"
    run 1 "${common[@]}" --speculative-algorithm dspark
    expect_rc 2
    expect_err "--speculative-algorithm dspark needs --speculative-draft-model-path"
    run 1 "${common[@]}" --speculative-dspark-block-size 3
    expect_rc 2
    expect_err "--speculative-dspark-block-size needs --speculative-algorithm dspark"
    run 1 "${common[@]}" --speculative-num-draft-tokens 3
    expect_rc 2
    expect_err "--speculative-num-draft-tokens needs --speculative-algorithm dspark"
    run 1 "${common[@]}" "${spec[@]}" --speculative-num-draft-tokens 3 --speculative-adaptive
    expect_rc 2
    expect_err "give one of the two"
    run 1 "${common[@]}" --speculative-recalibrate
    expect_rc 2
    expect_err "--speculative-recalibrate needs --speculative-algorithm dspark"
    run 1 "${common[@]}" "${spec[@]}" --speculative-num-draft-tokens 3 --speculative-recalibrate
    expect_rc 2
    expect_err "--speculative-recalibrate measures the step costs of --speculative-adaptive"
    run 1 "${common[@]}" "${spec[@]}" --speculative-num-draft-tokens 9
    expect_rc 2
    expect_err "--speculative-num-draft-tokens 9 exceeds the drafter's block size 7"
    run 1 "${common[@]}" "${spec[@]}" --speculative-dspark-block-size 65
    expect_rc 2
    expect_err "--speculative-dspark-block-size 65 must be in 1..64"
    run 1 "${common[@]}" --speculative-draft-model-path "$draft" --draft-model-path "$ck"
    expect_rc 2
    expect_err "and its alias --draft-model-path"
    run 2 "${common[@]}" "${spec[@]}" --tp 2 --dp 2 --enable-dp-attention
    expect_rc 2
    expect_err "--speculative-algorithm dspark with --enable-dp-attention and --dp 2 needs --enable-dp-lm-head"
    run 1 logits --model-path "$ck" --prompt hi --out "$work/l.bin" "${spec[@]}"
    expect_rc 2
    expect_err "--speculative-algorithm applies to generation, not \`k3eval logits\`"
    ;;
  log_errors_2)
    # An error logged by any rank fails the run after the fact: status error, exit 2.
    run 2 "${common[@]}" --num-questions 2 --max-new-tokens 4 --artifacts-dir "$work/a" --debug-log-error 1
    expect_rc 2
    expect_out '^Log scan: 1 error\(s\) in 2 rank log\(s\)$'
    expect_out 'rank-00001.log:[0-9]+: .*injected error line'
    expect_out '^Status: error$'
    [[ $(cat "$work/a/status") == error ]] || fail "status file: $(cat "$work/a/status")"
    ;;
  bad_data_1)
    { head -n 2 "$data"; echo '{"question": "What is 1+1?"}'; } >"$work/bad.jsonl"
    run 1 --model-path "$ck" --data-path "$work/bad.jsonl" --num-questions 2 --num-shots 0
    expect_rc 2
    expect_err "$work/bad.jsonl:3"
    # Impossible serving configurations are refused before anything runs.
    run 1 --model-path "$ck" --data-path "$data" --num-questions 2 --context-length 100000000
    expect_rc 2
    expect_err "the engine needs"
    expect_err "lower --max-running-requests, --max-mamba-cache-size or --context-length"
    run 1 --model-path "$ck" --data-path "$data" --num-questions 2 --max-running-requests 4 --max-mamba-cache-size 4
    expect_rc 2
    expect_err "1 prefix snapshot(s) and 4 running requests need 5 state slots, but --max-mamba-cache-size allows 4"
    run 1 --model-path "$ck" --data-path "$data" --num-questions 2 --context-length 100
    expect_rc 2
    expect_err "exceed the context length 100 (--context-length)"
    run 1 --model-path "$ck" --data-path "$data" --num-questions 100000
    expect_rc 2
    expect_err "num_questions = 100000 exceeds the 1319 questions in $data"
    ;;
  logits_8)
    run 1 logits --model-path "$ck" --prompt "Question: What is 3 + 4?" --out "$work/one.bin" --fp32-activations
    expect_rc 0
    expect_out '^greedy next token: [0-9]+$'
    n=$(sed -nE 's/^tokens \(([0-9]+)\):.*/\1/p' <<<"$out")
    next1=$(grep '^greedy next token' <<<"$out")
    [[ $(stat -c %s "$work/one.bin") -eq $((n * 4352 * 4)) ]] || fail "logits file of $(stat -c %s "$work/one.bin") bytes for $n tokens"
    run 8 logits --model-path "$ck" --prompt "Question: What is 3 + 4?" --out "$work/eight.bin" --fp32-activations "${layout8[@]}"
    expect_rc 0
    expect_out "^$next1\$"
    [[ $(stat -c %s "$work/eight.bin") -eq $((n * 4352 * 4)) ]] || fail "8-rank logits file size"
    # --layers-out: 6 layers x (attention, FFN, stream) x positions x hidden 512.
    run 8 logits --model-path "$ck" --prompt "Question: What is 3 + 4?" --out "$work/eight.bin" \
      --layers-out "$work/eight.layers" "${layout8[@]}"
    expect_rc 0
    [[ $(stat -c %s "$work/eight.layers") -eq $((6 * 3 * n * 512 * 4)) ]] || fail "layers file size"
    # --prompts-file: every line in one launch, each prompt's files as --prompt writes them.
    printf 'Question: What is 3 + 4?\nQuestion: What is 5 + 6?\n' >"$work/two.txt"
    run 8 logits --model-path "$ck" --prompts-file "$work/two.txt" --out "$work/two-{}.bin" \
      --layers-out "$work/two-{}.layers" "${layout8[@]}"
    expect_rc 0
    expect_out '^prompt 1$'
    cmp -s "$work/two-0.bin" "$work/eight.bin" || fail "--prompts-file line 1's logits differ from --prompt's"
    cmp -s "$work/two-0.layers" "$work/eight.layers" || fail "--prompts-file line 1's layers differ from --prompt's"
    run 8 logits --model-path "$ck" --prompt "Question: What is 5 + 6?" --out "$work/second.bin" "${layout8[@]}"
    expect_rc 0
    cmp -s "$work/two-1.bin" "$work/second.bin" || fail "--prompts-file line 2's logits differ from --prompt's"
    # Refused before loading: --out without {}, an empty line (named by its number), both sources.
    run 1 logits --model-path "$ck" --prompts-file "$work/two.txt" --out "$work/two.bin"
    expect_rc 2
    expect_err "must hold {} for the prompt's index"
    printf 'Question: one\n\nQuestion: three\n' >"$work/gap.txt"
    run 1 logits --model-path "$ck" --prompts-file "$work/gap.txt" --out "$work/gap-{}.bin"
    expect_rc 2
    expect_err "$work/gap.txt:2: an empty line (one prompt per line)"
    run 1 logits --model-path "$ck" --prompts-file "$work/two.txt" --prompt "x" --out "$work/x-{}.bin"
    expect_rc 2
    expect_err "k3eval logits needs one of --prompt and --prompts-file"
    grep -q "shards loaded" "$work/err" && fail "a refused logits command loaded the model first"
    ;;
  numerics_8)
    # Issue 15's targets on the default synthetic GGUF (docs/ENGINE.md, "The synthetic model"):
    # int8 vs fp32 activations over 16 GSM8K questions, every position: median <= 1 %, worst
    # <= 3 %; 1 rank vs the quickstart's 8-rank layout in the default mode: <= 1 %.
    gguf=$(dirname "$ck")/tiny-gguf
    quickstart=(--tp 8 --dp 2 --ep 8 --enable-dp-attention --enable-dp-lm-head
                --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp --ranks-per-node 4)
    python3 -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i >= 16: break
    print(json.loads(line)["question"].replace("\n", " "))' "$data" >"$work/questions.txt"
    head -n 4 "$work/questions.txt" >"$work/first4.txt"
    run 1 logits --model-path "$gguf" --prompts-file "$work/questions.txt" --out "$work/int8-{}.bin"
    expect_rc 0
    run 1 logits --model-path "$gguf" --prompts-file "$work/questions.txt" --out "$work/fp32-{}.bin" --fp32-activations
    expect_rc 0
    run 8 logits --model-path "$gguf" --prompts-file "$work/first4.txt" --out "$work/eight-{}.bin" "${quickstart[@]}"
    expect_rc 0
    python3 - "$work" <<'PY' || fail "outside the numerics targets (docs/PERFORMANCE.md, \"Numerical agreement targets\")"
import math, struct, sys
work = sys.argv[1]
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("%df" % (len(b) // 4), b)
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b))
modes = sorted(rel(floats(f"{work}/int8-{i}.bin"), floats(f"{work}/fp32-{i}.bin")) for i in range(16))
layouts = [rel(floats(f"{work}/eight-{i}.bin"), floats(f"{work}/int8-{i}.bin")) for i in range(4)]
print("int8 vs fp32 activations, 16 questions: median %.4f worst %.4f" % (modes[8], modes[-1]))
print("1 rank vs 8 ranks (quickstart layout), default mode: worst of 4 questions %.4f" % max(layouts))
assert modes[8] <= 0.01 and modes[-1] <= 0.03 and max(layouts) <= 0.01
PY
    ;;
  throughput_8)
    # SGLang's offline throughput report: its names, its block, figures that add up,
    # and the artifacts of a run.
    run 8 "${common[@]}" "${layout8[@]}" --mode throughput --dataset-name random \
      --random-input-len 32 --random-output-len 6 --num-prompts 8 --artifacts-dir "$work/a"
    expect_rc 0
    expect_out '^====== Offline Throughput Benchmark Result =======$'
    expect_out '^Successful requests: +8$'
    expect_out '^Total input tokens: +256$'
    expect_out '^Total generated tokens: +48$'
    expect_out '^DP group 0: +4 requests, 128 input \+ 24 generated tokens in [0-9.]+ s$'
    expect_out '^DP group 1: +4 requests, 128 input \+ 24 generated tokens in [0-9.]+ s$'
    expect_out '^P99 TTFT \(ms\): +[0-9]+\.[0-9]{2}$'
    expect_out '^Mean TPOT \(ms\): +[0-9]+\.[0-9]{2}$'
    # Where the time went: every kind of traffic the layout has, per step.
    expect_out '^Collectives: 8 ranks on 1 host\(s\), [0-9]+ steps in [0-9.]+ s'
    for kind in 'attention TP' 'EP all-to-all' 'LM head' 'DP sync'; do
      expect_out "^  $kind +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+ +[0-9.]+ (B|KiB|MiB)\$"
    done
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["collectives"]; assert c["ranks"] == 8 and {"attention TP","EP all-to-all","LM head","DP sync"} <= {k["kind"] for k in c["kinds"]} and all(k["bytes"] > 0 for k in c["kinds"] if k["kind"] != "other"), c' \
      "$work/a/summary.json" || fail "summary.json: no collectives by kind"
    expect_err 'progress: 8/8 requests'
    [[ $(cat "$work/a/status") == ok ]] || fail "status file: $(cat "$work/a/status")"
    h5dump -a /runs/0/kind "$work/a/history.h5" 2>&1 | grep -qF '"throughput"' ||
      fail "history.h5 lacks a throughput record: $(h5dump -A "$work/a/history.h5" 2>&1 | head -20)"
    python3 - "$work/a" "$work/out" <<'PY' || fail "the report, requests.jsonl and summary.json disagree"
import json, re, sys
a, out = sys.argv[1], open(sys.argv[2]).read()
value = lambda label: float(re.search(r"^" + re.escape(label) + r"\s+([0-9.]+)$", out, re.M).group(1))
rows = [json.loads(l) for l in open(a + "/requests.jsonl")]
assert sorted(r["id"] for r in rows) == list(range(8)), rows
assert all(r["input_tokens"] == 32 and r["output_tokens"] == 6 for r in rows), rows
assert all(0 < r["ttft_s"] <= r["latency_s"] for r in rows), rows
summary = json.load(open(a + "/summary.json"))
m = summary["metrics"]
assert summary["kind"] == "throughput" and m["requests"] == 8 and m["output_tokens"] == 48, summary
# The block's rates are its totals over its duration (two decimals printed).
duration = m["duration_s"]
assert abs(value("Benchmark duration (s):") - duration) <= 0.005
for label, total in (("Request throughput (req/s):", 8), ("Input token throughput (tok/s):", 256),
                     ("Output token throughput (tok/s):", 48), ("Total token throughput (tok/s):", 304)):
    assert abs(value(label) - total / duration) <= 0.005 + 1e-9 * total / duration, label
assert abs(value("Mean E2E Latency (ms):") - 1e3 * sum(r["latency_s"] for r in rows) / 8) <= 0.005
assert json.load(open(a + "/config.json"))["dataset_name"] == "random"
PY
    # A verdict against a throughput baseline of this machine class: far above the measured
    # speed is a regression (exit 1), far below passes; another machine class is refused before
    # loading (speeds of different machines are not comparable).
    machine=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["machine"])' "$work/a/config.json")
    measured=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics"]["output_throughput"])' "$work/a/summary.json")
    for factor in 100 0.01; do
      python3 - "$work/b-$factor.json" "$machine" "$measured" "$factor" <<'PY'
import json, sys
json.dump({"benchmark": "throughput", "output_throughput": float(sys.argv[3]) * float(sys.argv[4]),
           "tolerance": {"mode": "relative", "value": 0.9}, "machine": sys.argv[2]},
          open(sys.argv[1], "w"))
PY
    done
    throughput=("${common[@]}" "${layout8[@]}" --mode throughput --random-input-len 32 --random-output-len 6 --num-prompts 8)
    run 8 "${throughput[@]}" --baseline "$work/b-100.json" --artifacts-dir "$work/r"
    expect_rc 1
    expect_out '^Baseline: [0-9.]+ token/s .*: REGRESSION$'
    expect_out '^  output throughput [0-9.]+ token/s is [0-9.]+ % below the baseline'
    expect_out '^Status: regression$'
    [[ $(cat "$work/r/status") == regression ]] || fail "status file: $(cat "$work/r/status")"
    grep -q '"pass": false' "$work/r/summary.json" || fail "summary.json lacks the verdict"
    run 8 "${throughput[@]}" --baseline "$work/b-0.01.json"
    expect_rc 0
    expect_out ': PASS$'
    sed "s/\"machine\": \"[^\"]*\"/\"machine\": \"another CPU (64 logical CPUs)\"/" "$work/b-0.01.json" >"$work/b-other.json"
    run 8 "${throughput[@]}" --baseline "$work/b-other.json"
    expect_rc 2
    expect_err 'this machine is'
    grep -q "shards loaded" "$work/err" && fail "a baseline of another machine was refused only after loading"
    # Today's names stay aliases; SGLang's random range ratio draws lengths from the seed.
    run 8 "${common[@]}" "${layout8[@]}" --mode throughput --input-len 32 --output-len 6 \
      --num-prompts 8 --random-range-ratio 0.5 --seed 3
    expect_rc 0
    total=$(sed -nE 's/^Total input tokens: +([0-9]+)$/\1/p' <<<"$out")
    [[ -n $total && $total -ge 128 && $total -le 256 ]] || fail "input tokens $total outside [8 x 16, 8 x 32]"
    run 1 "${common[@]}" --mode throughput --random-input-len 8 --input-len 9
    expect_rc 2
    expect_err "--random-input-len 8 and its alias --input-len 9 disagree"
    run 1 "${common[@]}" --mode throughput --dataset-name sharegpt
    expect_rc 2
    expect_err "--dataset-name 'sharegpt' is not one of random, gsm8k"
    run 1 "${common[@]}" --mode throughput --random-range-ratio 1.5
    expect_rc 2
    expect_err "--random-range-ratio must be in [0, 1]"
    # The GSM8K prompts, as the evaluation builds them.
    run 1 "${common[@]}" --mode throughput --dataset-name gsm8k --num-prompts 2 --output-len 3
    expect_rc 0
    expect_out '^Successful requests: +2$'
    expect_out '^Total generated tokens: +6$'
    ;;
  *)
    fail "unknown case"
    ;;
esac
[[ $failures -eq 0 ]] && echo "PASS [$case_name]"
exit $((failures > 0))
