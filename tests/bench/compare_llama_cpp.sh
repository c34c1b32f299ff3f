#!/usr/bin/env bash
# k3eval against llama.cpp's kimi-k3 model on the same synthetic GGUF: (1) the file loads and
# generates there, single-file and split; (2) next-token logits of GSM8K questions agree;
# (3) llama-batched-bench prefill/decode tokens/s at the shapes of tests/bench/bench_engine.sh.
# It never builds llama.cpp: point LLAMA_CPP_BIN at the bin/ folder of a llama.cpp build you
# made yourself (docs/ENGINE.md, "llama.cpp comparison", says which commit and flags).
# Usage: LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin tests/bench/compare_llama_cpp.sh [logits|bench|all]
# Environment: BUILD (default build), QUESTIONS (16), THREADS (1), BATCHES (1,16,64),
#   PROMPT_LEN (512), DECODE_PROMPT_LEN (32), DECODE_STEPS (32).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
bin=$build/bin
what=${1:-all}
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to the bin/ folder of a llama.cpp build (see the header)}"
for tool in llama-debug llama-completion llama-batched-bench; do
  [[ -x $LLAMA_CPP_BIN/$tool ]] || { echo "error: $LLAMA_CPP_BIN/$tool is missing" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
work=$build/bench/llama-cpp
mkdir -p "$work"

# llama.cpp's CPU weight repacking takes the 3-D Q4_0 attn_k_b into its repack buffer, whose
# matmul supports only 2-D weights: graph reservation then aborts (GGML_ASSERT in
# ggml_backend_sched_split_graph). --no-repack keeps every weight in the plain CPU buffer.
# -ctk/-ctv f32: llama.cpp's MLA cache is F16 by default; k3eval caches fp32.
llama_common=(--no-repack -t "${THREADS:-1}")

synth() {  # synth DIR [k3ckpt synth arguments...]: the checkpoint, made when missing
  local dir=$1
  shift
  [[ -d $dir ]] || "$bin/k3ckpt" synth --format gguf --out "$dir" "$@" >&2
}

# (1) Loads and generates: the default synthetic GGUF in one file and in three splits.
synth "$work/tiny-gguf"
synth "$work/tiny-gguf-split" --shards 3
synth "$work/routed-gguf" --router-margin 4
for model in "$work/tiny-gguf/kimi-k3-tiny.gguf" "$work/tiny-gguf-split/kimi-k3-tiny-00001-of-00003.gguf"; do
  out=$("$LLAMA_CPP_BIN/llama-completion" -m "$model" -no-cnv "${llama_common[@]}" -n 8 --temp 0 \
    -p "Question: what is 2+3?" 2>"$work/completion.log") ||
    { echo "error: llama-completion failed on $model (log: $work/completion.log)" >&2; exit 1; }
  echo "llama-completion $(basename "$model"): ${out//$'\n'/ }"
done

if [[ $what == logits || $what == all ]]; then
  # (2) Next-token logits on the fixed-routing model (k3ckpt synth --router-margin: routing
  # cannot flip under rounding, so the comparison measures numerics, not the random router).
  model=$work/routed-gguf/kimi-k3-tiny.gguf
  python3 -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i >= int(sys.argv[2]): break
    print(json.loads(line)["question"].replace("\n", " "))
' "$root/../shared/data/gsm8k/test.jsonl" "${QUESTIONS:-16}" >"$work/questions.txt"
  n=0
  while IFS= read -r q; do
    rm -rf "$work/debug"
    "$LLAMA_CPP_BIN/llama-debug" -m "$model" "${llama_common[@]}" -ctk f32 -ctv f32 -p "$q" \
      --save-logits --logits-output-dir "$work/debug" >"$work/debug.log" 2>&1 ||
      { echo "error: llama-debug failed (log: $work/debug.log)" >&2; exit 1; }
    cp "$work/debug/llamacpp-kimi-k3-tiny.bin" "$work/llama-$n.bin"
    cp "$work/debug/llamacpp-kimi-k3-tiny-tokens.bin" "$work/llama-$n.tokens"
    "$bin/k3eval" logits --model-path "$work/routed-gguf" --prompt "$q" --out "$work/k3-$n.bin" \
      >"$work/k3-$n.txt" 2>"$work/k3.log"
    "$bin/k3eval" logits --model-path "$work/routed-gguf" --prompt "$q" --fp32-activations \
      --out "$work/k3fp32-$n.bin" >"$work/k3fp32-$n.txt" 2>"$work/k3.log"
    n=$((n + 1))
  done <"$work/questions.txt"
  python3 - "$work" "$n" <<'EOF'
import math, struct, sys
work, n = sys.argv[1], int(sys.argv[2])
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("%df" % (len(b) // 4), b)
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b))
def argmax(v):
    return max(range(len(v)), key=v.__getitem__)
rows, same_tokens, same_argmax = [], 0, 0
for i in range(n):
    llama = floats(f"{work}/llama-{i}.bin")
    V = len(llama)
    ours = floats(f"{work}/k3-{i}.bin")[-V:]
    ours32 = floats(f"{work}/k3fp32-{i}.bin")[-V:]
    ids = list(struct.unpack("%di" % (len(open(f"{work}/llama-{i}.tokens", "rb").read()) // 4),
                             open(f"{work}/llama-{i}.tokens", "rb").read()))
    our_ids = [int(t) for t in open(f"{work}/k3-{i}.txt").read().split("):", 1)[1].split("\n")[0].split()]
    same_tokens += ids == our_ids
    same_argmax += argmax(llama) == argmax(ours)
    rows.append((len(ids), rel(ours, llama), rel(ours32, llama), rel(ours, ours32),
                 argmax(llama), argmax(ours)))
print("%3s %7s %16s %16s %16s %8s %8s" % ("q", "tokens", "k3eval vs llama", "k3 fp32 vs llama",
                                          "k3 int8 vs fp32", "llama", "k3eval"))
for i, r in enumerate(rows):
    print("%3d %7d %16.4f %16.4f %16.4f %8d %8d" % ((i,) + r))
med = lambda xs: sorted(xs)[len(xs) // 2]
print(f"prompts {n}: identical token ids {same_tokens}/{n}, same greedy next token {same_argmax}/{n}")
print("median relative L2: k3eval vs llama.cpp %.4f (worst %.4f), k3eval fp32 vs llama.cpp %.4f, "
      "k3eval int8 vs its own fp32 %.4f" % (med([r[1] for r in rows]), max(r[1] for r in rows),
                                           med([r[2] for r in rows]), med([r[3] for r in rows])))
# The stated tolerance (docs/ENGINE.md, "llama.cpp comparison").
if same_tokens != n or max(r[1] for r in rows) > 0.35 or med([r[1] for r in rows]) > 0.2:
    print("FAIL: outside the stated tolerance (identical ids, worst <= 0.35, median <= 0.2)")
    sys.exit(1)
print("within the stated tolerance")
EOF
fi

if [[ $what == bench || $what == all ]]; then
  # (3) llama-batched-bench on the default synthetic GGUF (the file bench_engine.sh uses):
  # prefill = PROMPT_LEN-token prompts, decode = DECODE_STEPS tokens after DECODE_PROMPT_LEN.
  model=$work/tiny-gguf/kimi-k3-tiny.gguf
  batches=${BATCHES:-1,16,64}
  max_batch=$(tr ',' '\n' <<<"$batches" | sort -n | tail -1)
  ctx=$((max_batch * (${PROMPT_LEN:-512} + 32) + 256))
  echo "llama-batched-bench, $(nproc) cores, threads ${THREADS:-1}, load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$LLAMA_CPP_BIN/llama-batched-bench" -m "$model" "${llama_common[@]}" -tb "${THREADS:-1}" \
    -c "$ctx" -b 2048 -ub 512 -npp "${PROMPT_LEN:-512}" -ntg 1 -npl "$batches" 2>/dev/null | grep '^|'
  "$LLAMA_CPP_BIN/llama-batched-bench" -m "$model" "${llama_common[@]}" -tb "${THREADS:-1}" \
    -c "$ctx" -b 2048 -ub 512 -npp "${DECODE_PROMPT_LEN:-32}" -ntg "${DECODE_STEPS:-32}" \
    -npl "$batches" 2>/dev/null | grep '^|'
fi
