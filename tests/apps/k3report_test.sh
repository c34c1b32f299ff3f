#!/usr/bin/env bash
# k3report end to end on histories that k3eval wrote: the trend table, a question-by-question
# comparison, the regression check and its exit codes, the SVG chart, and the errors for a
# missing or foreign file, unknown run numbers and bad options.
# Usage: k3report_test.sh CASE K3REPORT K3EVAL WORK_DIR CHECKPOINT_DIR DATA_FILE
set -uo pipefail
case_name=$1
k3report=$2
k3eval=$3
work=$4/k3report_$case_name
ck=$5
data=$6
rm -rf "$work" && mkdir -p "$work"
# shellcheck disable=SC2001  # a bracket expression, not a substitution of one string
ck_re=$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"$ck")  # the checkpoint path inside a regex
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

failures=0
fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }

# evaluate ARGS...: one k3eval run of 3 questions on one rank, appended to $work/history.h5.
evaluate() {
  timeout 120 mpirun --oversubscribe -np 1 "$k3eval" --model-path "$ck" --data-path "$data" \
    --num-questions 3 --progress log --history "$work/history.h5" "$@" >"$work/eval.out" 2>&1
  eval_rc=$?
}
# report ARGS...: k3report run from $work (so ./history.h5 is the default); fills $rc, $out, $err.
report() {
  (cd "$work" && timeout 30 "$k3report" "$@") >"$work/out" 2>"$work/err"
  rc=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
}
expect_rc() { [[ $rc -eq $1 ]] || fail "k3report exit code $rc, expected $1; stdout: $out; stderr: $err"; }
expect_out() { grep -qE -- "$1" <<<"$out" || fail "stdout lacks /$1/; stdout: $out"; }
expect_err() { grep -qxF -- "$1" <<<"$err" || fail "stderr is not '$1'; stderr: $err"; }
lines() { grep -cE -- "$1" <<<"$out"; }

case $case_name in
  runs_3)
    # Runs 0 and 1 differ in length, so their tokens differ; run 2 fails a baseline.
    evaluate --max-new-tokens 8
    [[ $eval_rc -eq 0 ]] || fail "k3eval run 0 exited $eval_rc: $(tail -5 "$work/eval.out")"
    evaluate --max-new-tokens 6
    [[ $eval_rc -eq 0 ]] || fail "k3eval run 1 exited $eval_rc: $(tail -5 "$work/eval.out")"

    # Any accuracy passes with a tolerance of 1.
    report check --tolerance 1
    expect_rc 0
    expect_out "^check: run 1 \(checkpoint $ck_re, configuration \(none\)\) ok: accuracy [01]\.[0-9]{4} >= -?[01]\.[0-9]{4} \(previous run 0: [01]\.[0-9]{4} - 1 \(absolute tolerance\)\)$"
    report check --relative 0.99
    [[ $rc -eq 0 || $rc -eq 1 ]] || fail "check --relative exited $rc: $err"
    expect_out ' \(previous run 0: [01]\.[0-9]{4} x 0\.99 \(relative tolerance\)\)$'

    report compare
    expect_rc 0
    expect_out "^run 0 \(.*Z\) -> run 1 \(.*Z\): checkpoint $ck_re, configuration \(none\)$"
    [[ $(lines '^  id [0-2]: .* -> .*, still (in)?correct, tokens differ from position [0-6] \([0-9]+ -> [0-9]+ tokens\)$') -eq 3 ]] \
      || fail "compare does not list the 3 questions: $out"
    expect_out '^accuracy: [01]\.[0-9]{3} -> [01]\.[0-9]{3} \([+-][01]\.[0-9]{3}\)$'
    expect_out '^totals: 3 questions compared, .* tokens identical for 0 of 3$'

    echo '{"accuracy": 0.9, "tolerance": {"mode": "relative", "value": 0.99}}' >"$work/high.json"
    evaluate --max-new-tokens 6 --baseline "$work/high.json"
    [[ $eval_rc -eq 1 ]] || fail "k3eval run 2 with an unreachable baseline exited $eval_rc"

    report check
    expect_rc 1
    expect_out "^check: run 2 \(checkpoint $ck_re, configuration \(none\)\) REGRESSION: verdict \"regression\" \(accuracy [01]\.[0-9]{4}, baseline 0\.9000, threshold 0\.8910\)$"
    [[ $(wc -l <"$work/out") -eq 1 ]] || fail "check printed more than one line: $out"

    report trend
    expect_rc 0
    expect_out "^checkpoint $ck_re, configuration \(none\): 3 runs$"
    expect_out '^  run  timestamp +questions  accuracy   change  invalid   change   out tok/s   change  latency s   change  verdict$'
    expect_out '^    0  20[0-9-]{8}T[0-9:]{8}Z +3 +[01]\.[0-9]{3} +- +[01]\.[0-9]{3} +- +[0-9]+\.[0-9]{3} +- +[0-9]+\.[0-9]{3} +-  ok$'
    expect_out '^    1  20.*Z +3 +[01]\.[0-9]{3} +[+-][01]\.[0-9]{3} +[01]\.[0-9]{3} +[+-][01]\.[0-9]{3} +[0-9]+\.[0-9]{3} +[+-][0-9]+\.[0-9]% .*  ok$'
    expect_out '^    2  20.* [+-][0-9]+\.[0-9]%  regression$'
    report --history history.h5 trend --last 1 --checkpoint "$ck/" --config ''
    expect_rc 0
    expect_out '^checkpoint .*: last 1 of 3 runs$'
    [[ $(lines '^ +[0-9]+  20') -eq 1 ]] || fail "--last 1 printed: $out"

    # Same tokens: runs 1 and 2 generated with the same settings.
    report compare 1 2
    expect_rc 0
    expect_out '^  no answer and no token changed$'
    expect_out 'tokens identical for 3 of 3$'

    report plot --out "$work/chart.svg"
    expect_rc 0
    expect_out "^wrote .*/chart\.svg: checkpoint $ck_re, configuration \(none\), 3 runs$"
    svg=$work/chart.svg
    head -1 "$svg" | grep -qxF '<?xml version="1.0" encoding="UTF-8"?>' || fail "no XML declaration: $(head -2 "$svg")"
    grep -q '^<svg xmlns="http://www.w3.org/2000/svg" ' "$svg" || fail "no svg root"
    [[ $(tail -1 "$svg") == "</svg>" ]] || fail "the svg does not end with </svg>"
    [[ $(grep -c '<svg' "$svg") -eq 1 ]] || fail "not one svg element"
    grep -qF '>GSM8K accuracy and output throughput</text>' "$svg" || fail "no title"
    grep -qF '<g id="legend">' "$svg" || fail "no legend"
    grep -qF '<g id="accuracy">' "$svg" || fail "no accuracy panel"
    grep -qF '<g id="throughput">' "$svg" || fail "no throughput panel"
    [[ $(grep -c '<polyline' "$svg") -eq 2 ]] || fail "expected a line per panel"
    [[ $(grep -c '<circle class="alarm"' "$svg") -eq 2 ]] || fail "run 2 is not ringed in both panels"
    [[ $(grep -c '<title>run [0-2] (' "$svg") -eq 8 ]] || fail "expected 3 points per panel and 2 rings"
    grep -qF '>output throughput (token/s)</text>' "$svg" || fail "no throughput axis label"
    grep -qF '>1.0</text>' "$svg" || fail "no accuracy tick 1.0"
    # Every element opened is closed (the self-closing ones aside).
    for tag in g text title; do
      [[ $(grep -o "<${tag}[ >]" "$svg" | wc -l) -eq $(grep -o "</$tag>" "$svg" | wc -l) ]] \
        || fail "<$tag> opened and closed a different number of times"
    done
    if command -v xmllint >/dev/null; then
      xmllint --noout "$svg" 2>"$work/xmllint" || fail "xmllint: $(cat "$work/xmllint")"
    fi

    # An offline throughput run lands in the same history as run 3, in a series of
    # its own shown beside the evaluations; check judges it on token/s; compare refuses it.
    evaluate --mode throughput --random-input-len 16 --random-output-len 4 --num-prompts 2
    [[ $eval_rc -eq 0 ]] || fail "k3eval throughput run exited $eval_rc: $(tail -5 "$work/eval.out")"
    report trend
    expect_rc 0
    expect_out "^checkpoint $ck_re, configuration \(none\): 3 runs$"
    expect_out "^checkpoint $ck_re, configuration \(none\), offline throughput runs: 1 run$"
    expect_out '^  run  timestamp +requests  accuracy .* duration +change  verdict$'
    expect_out '^    3  20[0-9-]{8}T[0-9:]{8}Z +2 +- +- +- +- +[0-9]+\.[0-9]{3} +- +[0-9]+\.[0-9]{3} +-  ok$'
    report check
    expect_rc 0
    expect_out "^check: run 3 \(checkpoint $ck_re, configuration \(none\), offline throughput runs\) ok: output throughput [0-9]+\.[0-9]{3} token/s, no baseline and no previous run to compare with$"
    report compare 2 3
    expect_rc 2
    grep -qF "run 3 is an offline throughput run" <<<"$err" || fail "compare did not refuse the throughput run: $err"
    report plot --out "$work/throughput.svg"
    expect_rc 0
    grep -qF '>Offline output throughput</text>' "$work/throughput.svg" || fail "no throughput title"
    ;;
  errors_1)
    report trend
    expect_rc 2
    expect_err "k3report: history.h5: no such history file"
    echo "not a history" >"$work/notes.txt"
    report check --history notes.txt
    expect_rc 2
    expect_err "k3report: notes.txt: not an HDF5 file, so not a k3eval history"

    evaluate --max-new-tokens 4
    [[ $eval_rc -eq 0 ]] || fail "k3eval exited $eval_rc: $(tail -5 "$work/eval.out")"
    report compare 0 7
    expect_rc 2
    expect_err "k3report: history.h5: no run 7; the history holds runs 0 to 0"
    report compare
    expect_rc 2
    expect_err "k3report: history.h5: compare needs two runs of checkpoint $ck, configuration (none); the history holds one, run 0 (name two run numbers to compare across series)"
    report compare 0 x1
    expect_rc 2
    expect_err "k3report: compare: 'x1' is not a run number"
    report compare 0
    expect_rc 2
    expect_err "k3report: compare: give two run numbers, or none"
    report trend --checkpoint /no/such/checkpoint
    expect_rc 2
    grep -qxF "k3report: history.h5: no run of checkpoint /no/such/checkpoint; the history holds:" <<<"$err" \
      || fail "stderr: $err"
    grep -qxF "  checkpoint $ck, configuration (none) (1 run)" <<<"$err" || fail "stderr: $err"
    report check --tolerance 0.1 --relative 0.99
    expect_rc 2
    expect_err "k3report: check: --tolerance and --relative exclude each other"
    report plot
    expect_rc 2
    grep -qF "the option '--out' is required" <<<"$err" || fail "stderr: $err"
    report frobnicate
    expect_rc 2
    grep -qxF "k3report: unknown command 'frobnicate'" <<<"$err" || fail "stderr: $err"
    report
    expect_rc 2
    report --help
    expect_rc 0
    expect_out '^usage: k3report'
    # A single run: compared with nothing, the check passes.
    report check
    expect_rc 0
    expect_out 'ok: accuracy 0\.0000, no baseline and no previous run to compare with$'
    ;;
  *)
    fail "unknown case"
    ;;
esac
[[ $failures -eq 0 ]] && echo "PASS [$case_name]"
exit $((failures > 0))
