#!/usr/bin/env bash
# Decode tokens/s with and without DSpark speculative decoding, A/B alternated in one
# run: k3eval --mode throughput on random prompts (stop tokens ignored), batch 1 and 16, on one
# rank and on two (DP attention, DP LM head), each case REPS times per side.
#
#   tests/bench/bench_speculative.sh [tiny|hidden2048|deep]
#
# tiny: the quickstart's synthetic pair (build/checkpoints). hidden2048: the tiny preset at hidden
# 2048 in GGUF (103 MB; its derived draft, 164 MB of BF16, is larger than it). deep: the same
# widths at 48 layers in four AttnRes blocks (706 MB GGUF), so that the five-layer drafter is
# small next to its target, as Kimi-K3's is. The GGUF pairs are written to build/bench/ on first
# use. Environment: REPS (2), BATCHES ("1 16"), RANKS ("1 2"), PROMPTS per sequence slot (4:
# one random prompt can fall into a loop the drafter predicts whole), INPUT_LEN (64),
# OUTPUT_LEN (128), BLOCK (the drafter's block size; default the checkpoint's 7), SPEC_ARGS
# (more k3eval options for the speculative side, e.g. "--speculative-num-draft-tokens 7" for a
# fixed draft length instead of the default goodput choice), BUILD (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
pair=${1:-hidden2048}
reps=${REPS:-2}
batches=${BATCHES:-1 16}
ranks=${RANKS:-1 2}
input_len=${INPUT_LEN:-64}
output_len=${OUTPUT_LEN:-128}
prompts=${PROMPTS:-4}
block=${BLOCK:-}
read -r -a spec_args <<<"${SPEC_ARGS:-}"
corpus=$root/../shared/data/gsm8k/train.jsonl

case $pair in
  tiny)
    target=$build/checkpoints/tiny-hf
    draft=$build/checkpoints/tiny-draft
    sets=()
    ;;
  hidden2048)
    target=$build/bench/hidden2048-gguf
    draft=$build/bench/hidden2048-draft
    sets=(--set hidden_size=2048)
    ;;
  deep)
    target=$build/bench/deep-gguf
    draft=$build/bench/deep-draft
    sets=(--set hidden_size=2048 --set num_hidden_layers=48 --set attn_res_block_size=12)
    ;;
  *)
    echo "usage: $0 [tiny|hidden2048|deep]" >&2
    exit 2
    ;;
esac
format=hf
[[ $pair != tiny ]] && format=gguf
[[ -f $target/config.json || -f $target/kimi-k3-tiny.gguf ]] ||
  "$build/bin/k3ckpt" synth --preset tiny --format $format --corpus "$corpus" "${sets[@]}" \
    --out "$target" >/dev/null
[[ $format == gguf ]] && target=$target/kimi-k3-tiny.gguf
[[ -f $draft/config.json ]] ||
  "$build/bin/k3ckpt" synth --preset tiny --format draft --corpus "$corpus" "${sets[@]}" \
    --out "$draft" >/dev/null

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=1

# One measurement: prints "tok/s accept_length tpot_ms lengths" (accept length "-" without
# speculation or verify rounds; TPOT is the mean time per output token after the first, i.e.
# decode alone; lengths: the decode rows per draft length, "K=0:12,K=7:40", "-" without).
run() {
  local np=$1 batch=$2 speculative=$3 layout=() spec=() out
  if [[ $np -gt 1 ]]; then
    layout=(--tp "$np" --dp "$np" --ep "$np" --enable-dp-attention --enable-dp-lm-head)
  fi
  if [[ $speculative == yes ]]; then
    spec=(--speculative-algorithm dspark --speculative-draft-model-path "$draft")
    [[ -n $block ]] && spec+=(--speculative-dspark-block-size "$block")
    spec+=("${spec_args[@]}")
  fi
  out=$(mpirun --oversubscribe -np "$np" "$build/bin/k3eval" --model-path "$target" \
    --mode throughput --dataset-name random --random-input-len "$input_len" \
    --random-output-len "$output_len" --num-prompts $((prompts * batch * np)) \
    --max-running-requests "$batch" --progress log "${layout[@]}" "${spec[@]}" 2>&1)
  local tps accept tpot lengths
  tps=$(awk -F: '/^Output token throughput/ {gsub(/ /, "", $2); print $2}' <<<"$out")
  accept=$(awk -F: '/^Accept length/ {gsub(/ /, "", $2); print $2}' <<<"$out")
  [[ $accept == - ]] && accept=
  tpot=$(awk -F: '/^Mean TPOT/ {gsub(/ /, "", $2); print $2}' <<<"$out")
  lengths=$(sed -nE 's/^Draft lengths \([a-z-]+\): +//p' <<<"$out" | sed -E 's/ /:/g; s/,:/,/g')
  [[ -n $tps && -n $tpot ]] || { echo "k3eval failed:" >&2; echo "$out" >&2; exit 1; }
  echo "$tps ${accept:--} $tpot ${lengths:--}"
}

echo "# $(date -u +%FT%TZ) $pair pair, input $input_len, output $output_len tokens per prompt," \
  "$prompts prompts per sequence slot, block size ${block:-of the checkpoint}, $reps reps per side," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ranks | batch per DP group | plain tok/s | dspark tok/s | speed-up | plain TPOT ms |" \
  "dspark TPOT ms | decode speed-up | accept length | decode rows per K (last rep)"
for np in $ranks; do
  for batch in $batches; do
    plain=() spec=() plain_tpot=() spec_tpot=() accept=- lengths=-
    for ((r = 0; r < reps; ++r)); do  # alternated, so drift hits both sides alike
      read -r tps _ tpot _ < <(run "$np" "$batch" no)
      plain+=("$tps")
      plain_tpot+=("$tpot")
      read -r tps accept tpot lengths < <(run "$np" "$batch" yes)
      spec+=("$tps")
      spec_tpot+=("$tpot")
    done
    best_plain=$(printf '%s\n' "${plain[@]}" | sort -g | tail -1)
    best_spec=$(printf '%s\n' "${spec[@]}" | sort -g | tail -1)
    ratio=$(awk -v a="$best_spec" -v b="$best_plain" 'BEGIN { printf "%.2f", a / b }')
    # Decode alone (the issue's "decode tokens/s"): best TPOT without over best TPOT with.
    best_plain_tpot=$(printf '%s\n' "${plain_tpot[@]}" | sort -g | head -1)
    best_spec_tpot=$(printf '%s\n' "${spec_tpot[@]}" | sort -g | head -1)
    decode=$(awk -v a="$best_plain_tpot" -v b="$best_spec_tpot" 'BEGIN { printf "%.2f", a / b }')
    echo "$np | $batch | ${plain[*]} | ${spec[*]} | ${ratio}x (best/best) | ${plain_tpot[*]} |" \
      "${spec_tpot[*]} | ${decode}x | $accept | $lengths"
  done
done
