#!/usr/bin/env bash
# Runs the main job on the embedded default: 8 local ranks shaped like the production layout
# (jobs/configs/quickstart.ini) on the synthetic tiny Kimi-K3 checkpoint, which is written to
# build/checkpoints/ on first use: it plans, loads and audits every rank's slice, then evaluates
# 20 GSM8K questions of ../shared/data/gsm8k/test.jsonl (or --data-path) and prints the report;
# artifacts go to build/artifacts/quickstart/. Installs and builds whatever is missing first;
# extra arguments go to k3eval (e.g. --num-questions 200, --model-path /ckpt/kimi-k3).
# On the embedded default with no extra arguments the run is checked against its golden tokens
# (jobs/baselines/quickstart-tiny.json): a flipped token ends it with exit 1 (REGRESSION).
# K3_SPECULATIVE=dspark runs it with speculative decoding: the synthetic tiny DSpark draft
# (build/checkpoints/tiny-draft, or K3_DRAFT_MODEL_PATH) proposes, the model verifies; the
# golden tokens must still hold.
# Each stage prints a dated line on stderr; the package manager's and compiler's full output go
# to build/quickstart.log, which a failing stage names. Only what the quickstart runs is built
# (k3eval, k3ckpt); ./tests/run.sh builds the rest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/build"
log=$root/build/quickstart.log
: >"$log"
started=$SECONDS
stage() { printf '[%s +%3ds] %s\n' "$(date +%T)" $((SECONDS - started)) "$*" >&2; }
failed() { stage "$1 failed; the full output is in $log"; tail -n 15 "$log" >&2; exit 2; }

# Only what the quickstart builds and runs; ./tests/run.sh installs the tests' packages.
stage "checking the Debian packages (jobs/install_deps.sh quickstart)"
missing=$("$root/jobs/install_deps.sh" quickstart --missing)
if [[ -n $missing ]]; then
  stage "installing $(wc -w <<<"$missing") package(s) with apt-get: $missing"
  "$root/jobs/install_deps.sh" quickstart >>"$log" 2>&1 || failed "installing packages"
fi
if [[ ! -f $root/build/CMakeCache.txt ]]; then
  stage "configuring build/ (CMake, Release; the tests are configured by ./tests/run.sh)"
fi
stage "building k3eval and k3ckpt"
# ninja's "[N/M]" lines, one every 10 steps and the last, as the build goes.
set +e
K3_DEPS=quickstart K3_BUILD_TARGETS="k3eval k3ckpt" "$root/jobs/build.sh" 2>&1 | tee -a "$log" |
  awk -v t0="$started" '/^\[[0-9]+\/[0-9]+\]/ {
      split(substr($1, 2, length($1) - 2), n, "/")
      if (n[1] % 10 == 0 || n[1] == n[2]) { printf "  build step %d of %d\n", n[1], n[2]; fflush() }
    }' >&2
built=${PIPESTATUS[0]}
set -e
[[ $built -eq 0 ]] || failed "building"

checkpoint=${K3_MODEL_PATH:-$root/build/checkpoints/tiny-hf}
golden=()
if [[ -z ${K3_MODEL_PATH:-} && $# -eq 0 ]]; then
  golden=(--baseline "$root/jobs/baselines/quickstart-tiny.json")
fi
if [[ ! -f $checkpoint/config.json ]]; then
  stage "writing the synthetic tiny checkpoint to $checkpoint"
  "$root/build/bin/k3ckpt" synth --preset tiny --format hf --shards 4 --out "$checkpoint" >>"$log" 2>&1 ||
    failed "writing the synthetic checkpoint"
fi

speculative=()
if [[ -n ${K3_SPECULATIVE:-} ]]; then
  draft=${K3_DRAFT_MODEL_PATH:-$root/build/checkpoints/tiny-draft}
  if [[ ! -f $draft/config.json ]]; then
    stage "writing the synthetic tiny DSpark draft to $draft"
    "$root/build/bin/k3ckpt" synth --preset tiny --format draft --out "$draft" >>"$log" 2>&1 ||
      failed "writing the synthetic draft"
  fi
  speculative=(--speculative-algorithm "$K3_SPECULATIVE" --speculative-draft-model-path "$draft")
fi

np=${K3_NP:-8}
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Ranks outnumber cores: waiting ranks must yield instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
stage "launching $np ranks (mpirun; k3eval's own log lines follow)"
exec mpirun --oversubscribe -np "$np" "$root/build/bin/k3eval" \
  --config "$root/jobs/configs/quickstart.ini" --model-path "$checkpoint" \
  --artifacts-dir "${K3_ARTIFACTS_DIR:-$root/build/artifacts/quickstart}" "${golden[@]}" \
  "${speculative[@]}" "$@"
