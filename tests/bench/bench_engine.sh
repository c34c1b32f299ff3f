#!/usr/bin/env bash
# Prefill and decode tokens/s of the engine (bench_engine) on a synthetic checkpoint, for every
# layout of docs/PERFORMANCE.md's engine table on 1 and 2 ranks, printed as one table with each run's batch-1 decode
# roofline (the weight bytes a token reads over the measured read bandwidth). Synthesizes the
# checkpoints into $BUILD/bench/<preset>-<format> when missing.
# Usage: tests/bench/bench_engine.sh [formats ...]   (default: gguf; also hf, modelslim)
# Environment: PRESET (tiny; wide: the real widths at 4 layers, a 6.2 GiB GGUF written in ~5 min),
#   BUILD (default build), REPS (3; wide 2), BATCHES (1,16,64; wide 1,16), PROMPT_LEN (512; wide
#   64), DECODE_STEPS (32; wide 8), PHASES (prefill,decode), CONFIGS (tp1 tp1-2t tp2-ep2
#   dp2-attn-ep2), CHUNK (512: prefill tokens per DP group per step, k3eval's default
#   --chunked-prefill-size and llama-batched-bench's -ub; 0 puts a whole batch in one step),
#   EXTRA (more bench_engine arguments, e.g. --no-repack for an A/B run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
bin=$build/bin
preset=${PRESET:-tiny}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
if [[ $preset == wide ]]; then
  defaults=(2 1,16 64 8)
else
  defaults=(3 1,16,64 512 32)
fi
common=(--reps "${REPS:-${defaults[0]}}" --batches "${BATCHES:-${defaults[1]}}"
  --prompt-len "${PROMPT_LEN:-${defaults[2]}}" --decode-steps "${DECODE_STEPS:-${defaults[3]}}"
  --phases "${PHASES:-prefill,decode}" --chunk "${CHUNK:-512}" --no-header)
# shellcheck disable=SC2206
common+=(${EXTRA:-})
# name | ranks | bench_engine arguments. GGUF's Q3_K routed experts cannot be split in columns
# over two ranks (MoE-TP 2), so TP2 splits the experts by EP. The DP configuration is the
# production flag set (jobs/configs/production.ini) at two ranks. --bind-to none: Open MPI binds
# ranks to cores when np <= cores, which would pin the 2-thread rank to one core.
layouts=(
  "tp1|1|--threads 1"
  "tp1-2t|1|--threads 2"
  "tp2-ep2|2|--tp 2 --ep 2"
  "dp2-attn-ep2|2|--tp 2 --dp 2 --ep 2 --enable-dp-attention --enable-dp-lm-head --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp"
)
configs=${CONFIGS:-tp1 tp1-2t tp2-ep2 dp2-attn-ep2}

model_path() {  # the checkpoint of format $1, synthesized when missing
  local dir=$build/bench/$preset-$1
  local marker=$dir/config.json
  [[ $1 == gguf ]] && marker=$dir/kimi-k3-$preset.gguf
  if [[ ! -f $marker ]]; then
    "$bin/k3ckpt" synth --preset "$preset" --format "$1" --out "$dir" >&2
  fi
  [[ $1 == gguf ]] && echo "$marker" || echo "$dir"
}

echo "machine: $(nproc) cores, $(date -u +%F), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s | %-9s | %5s | %7s | %-7s | %5s | %7s | %8s | %10s | %10s | %10s | %s\n' \
  config format ranks threads phase batch tokens "median s" "tok/s med" "tok/s best" \
  "tok/s worst" load
commands=()
for format in "${@:-gguf}"; do
  model=$(model_path "$format")
  for spec in "${layouts[@]}"; do
    IFS='|' read -r name np args <<<"$spec"
    [[ " $configs " == *" $name "* ]] || continue
    # shellcheck disable=SC2206
    cmd=(mpirun --oversubscribe --bind-to none -np "$np" "$bin/bench_engine" --model-path "$model" --label "$name"
      $args "${common[@]}")
    commands+=("${cmd[*]}")
    "${cmd[@]}" 2>&1 | awk '!/^#/ || /^# decode/ {print; fflush()}'
  done
done
echo
echo "load average at end $(cut -d' ' -f1-3 /proc/loadavg); commands:"
printf '  %s\n' "${commands[@]}"
