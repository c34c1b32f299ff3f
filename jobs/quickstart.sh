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
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/jobs/build.sh" >/dev/null

checkpoint=${K3_MODEL_PATH:-$root/build/checkpoints/tiny-hf}
golden=()
if [[ -z ${K3_MODEL_PATH:-} && $# -eq 0 ]]; then
  golden=(--baseline "$root/jobs/baselines/quickstart-tiny.json")
fi
if [[ ! -f $checkpoint/config.json ]]; then
  "$root/build/bin/k3ckpt" synth --preset tiny --format hf --shards 4 --out "$checkpoint"
fi

speculative=()
if [[ -n ${K3_SPECULATIVE:-} ]]; then
  draft=${K3_DRAFT_MODEL_PATH:-$root/build/checkpoints/tiny-draft}
  if [[ ! -f $draft/config.json ]]; then
    "$root/build/bin/k3ckpt" synth --preset tiny --format draft --out "$draft"
  fi
  speculative=(--speculative-algorithm "$K3_SPECULATIVE" --speculative-draft-model-path "$draft")
fi

np=${K3_NP:-8}
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Ranks outnumber cores: waiting ranks must yield instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
exec mpirun --oversubscribe -np "$np" "$root/build/bin/k3eval" \
  --config "$root/jobs/configs/quickstart.ini" --model-path "$checkpoint" \
  --artifacts-dir "${K3_ARTIFACTS_DIR:-$root/build/artifacts/quickstart}" "${golden[@]}" \
  "${speculative[@]}" "$@"
