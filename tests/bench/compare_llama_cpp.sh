#!/usr/bin/env bash
# k3eval against llama.cpp's kimi-k3 model on the same synthetic GGUF: (1) the file loads and
# generates there, single-file and split; (2) every position's logits of 16 GSM8K questions
# agree within the stated tolerance; (3) block by block, every layer's attention output, FFN
# output and stream on one question, so a difference is located to a block; (4)
# llama-batched-bench prefill/decode tokens/s at the shapes of tests/bench/bench_engine.sh, on the
# tiny GGUF or another (MODEL); (5) `gsm8k`: end to end, the same 5-shot GSM8K prompts (greedy,
# SGLang's stop strings, the same max new tokens, every question in flight) through llama.cpp
# (tests/bench/llama_cpp_gsm8k.cpp, continuous batching as llama-server's slots) and through
# k3eval, on the same cores, both output throughputs.
# It never builds llama.cpp itself: point LLAMA_CPP_BIN at the bin/ folder of a llama.cpp build
# you made (docs/ENGINE.md, "llama.cpp comparison", says which commit and flags); it compiles
# tests/bench/llama_cpp_layers.cpp (ours, on llama.h's public API) against that build.
# Usage: LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin tests/bench/compare_llama_cpp.sh [logits|layers|bench|gsm8k|all]
# Environment: BUILD (default build), LLAMA_CPP_SRC (default LLAMA_CPP_BIN/../..), QUESTIONS
#   (16; gsm8k 64), THREADS (1), BATCHES (1,16,64), PROMPT_LEN (512), DECODE_PROMPT_LEN (32),
#   DECODE_STEPS (32), MODEL (bench and gsm8k: a GGUF file, default the tiny one),
#   MAX_NEW_TOKENS (gsm8k, 256).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
bin=$build/bin
what=${1:-all}
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to the bin/ folder of a llama.cpp build (see the header)}"
llama_src=${LLAMA_CPP_SRC:-$LLAMA_CPP_BIN/../..}
case $what in
  logits | layers) tools=(llama-debug llama-completion) ;;
  bench) tools=(llama-completion llama-batched-bench) ;;
  gsm8k) tools=(llama-completion) ;;
  all) tools=(llama-debug llama-completion llama-batched-bench) ;;
  *) echo "usage: $0 [logits|layers|bench|gsm8k|all]" >&2; exit 2 ;;
esac
for tool in "${tools[@]}"; do
  [[ -x $LLAMA_CPP_BIN/$tool ]] || { echo "error: $LLAMA_CPP_BIN/$tool is missing" >&2; exit 2; }
done
[[ -f $llama_src/include/llama.h ]] ||
  { echo "error: no include/llama.h under $llama_src (set LLAMA_CPP_SRC)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
work=$build/bench/llama-cpp
mkdir -p "$work"

# llama.cpp's CPU weight repacking takes the 3-D Q4_0 attn_k_b into its repack buffer, whose
# matmul supports only 2-D weights: graph reservation then aborts (GGML_ASSERT in
# ggml_backend_sched_split_graph). --no-repack keeps every weight in the plain CPU buffer.
# -ctk/-ctv f32: llama.cpp's MLA cache is F16 by default; k3eval caches fp32.
llama_common=(--no-repack -t "${THREADS:-1}")

synth() {  # synth DIR [k3ckpt synth arguments...]: the checkpoint of this build's k3ckpt
  local dir=$1
  shift
  rm -rf "$dir"
  "$bin/k3ckpt" synth --format gguf --out "$dir" "$@" >/dev/null
}

# (1) Loads and generates: the default synthetic GGUF in one file and in three splits.
synth "$work/tiny-gguf"
synth "$work/tiny-gguf-split" --shards 3
for model in "$work/tiny-gguf/kimi-k3-tiny.gguf" "$work/tiny-gguf-split/kimi-k3-tiny-00001-of-00003.gguf"; do
  out=$("$LLAMA_CPP_BIN/llama-completion" -m "$model" -no-cnv "${llama_common[@]}" -n 8 --temp 0 \
    -p "Question: what is 2+3?" 2>"$work/completion.log") ||
    { echo "error: llama-completion failed on $model (log: $work/completion.log)" >&2; exit 1; }
  echo "llama-completion $(basename "$model"): ${out//$'\n'/ }"
done
model=${MODEL:-$work/tiny-gguf/kimi-k3-tiny.gguf}

if [[ $what == logits || $what == layers || $what == all ]]; then
  layers_tool=$work/llama_cpp_layers
  ${CXX:-g++} -std=c++17 -O2 -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$root/tests/bench/llama_cpp_layers.cpp" -L"$LLAMA_CPP_BIN" -lllama -lggml -lggml-base \
    -Wl,-rpath,"$LLAMA_CPP_BIN" -o "$layers_tool"
  python3 -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i >= int(sys.argv[2]): break
    print(json.loads(line)["question"].replace("\n", " "))
' "$root/../shared/data/gsm8k/test.jsonl" "${QUESTIONS:-16}" >"$work/questions.txt"
fi

# run_question NAME QUESTION [--layers]: llama.cpp's token ids (its own BPE), k3eval's logits in
# both activation modes, and llama.cpp's logits of every position on k3eval's token ids.
run_question() {
  local n=$1 q=$2 layers=${3:-}
  rm -rf "$work/debug"
  "$LLAMA_CPP_BIN/llama-debug" -m "$model" "${llama_common[@]}" -ctk f32 -ctv f32 -p "$q" \
    --save-logits --logits-output-dir "$work/debug" >"$work/debug.log" 2>&1 ||
    { echo "error: llama-debug failed (log: $work/debug.log)" >&2; exit 1; }
  cp "$work/debug/llamacpp-kimi-k3-tiny-tokens.bin" "$work/llama-$n.tokens"
  local k3_layers=() k3fp32_layers=()
  if [[ -n $layers ]]; then
    k3_layers=(--layers-out "$work/k3-$n.layers")
    k3fp32_layers=(--layers-out "$work/k3fp32-$n.layers")
  fi
  "$bin/k3eval" logits --model-path "$work/tiny-gguf" --prompt "$q" --out "$work/k3-$n.bin" \
    "${k3_layers[@]}" >"$work/k3-$n.txt" 2>"$work/k3.log"
  "$bin/k3eval" logits --model-path "$work/tiny-gguf" --prompt "$q" --fp32-activations \
    --out "$work/k3fp32-$n.bin" "${k3fp32_layers[@]}" >"$work/k3fp32-$n.txt" 2>"$work/k3.log"
  local ids
  ids=$(sed -n 's/^tokens ([0-9]*)://p' "$work/k3-$n.txt")
  # shellcheck disable=SC2086  # one argument per token id
  "$layers_tool" "$model" "$work/llama-$n" $ids >"$work/layers.log" 2>&1 ||
    { echo "error: llama_cpp_layers failed (log: $work/layers.log)" >&2; exit 1; }
}

if [[ $what == logits || $what == all ]]; then
  # (2) The logits of every position on the default synthetic GGUF (well-conditioned:
  # docs/ENGINE.md, "The synthetic model").
  n=0
  while IFS= read -r q; do
    run_question "$n" "$q" </dev/null
    n=$((n + 1))
  done <"$work/questions.txt"
  python3 - "$work" "$n" <<'PY'
import math, struct, sys
work, n = sys.argv[1], int(sys.argv[2])
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("%df" % (len(b) // 4), b)
def ints(path):
    b = open(path, "rb").read()
    return list(struct.unpack("%di" % (len(b) // 4), b))
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b))
def argmax(v):
    return max(range(len(v)), key=v.__getitem__)
rows, same_tokens, same_argmax = [], 0, 0
for i in range(n):
    llama, ours, ours32 = floats(f"{work}/llama-{i}.logits"), floats(f"{work}/k3-{i}.bin"), \
        floats(f"{work}/k3fp32-{i}.bin")
    ids = ints(f"{work}/llama-{i}.tokens")
    our_ids = [int(t) for t in
               open(f"{work}/k3-{i}.txt").read().split("):", 1)[1].split("\n")[0].split()]
    vocab = len(llama) // len(our_ids)
    same_tokens += ids == our_ids
    same_argmax += argmax(llama[-vocab:]) == argmax(ours[-vocab:])
    rows.append((len(ids), rel(ours, llama), rel(ours32, llama), rel(ours, ours32),
                 argmax(llama[-vocab:]), argmax(ours[-vocab:])))
print("relative L2 of the logits of every position:")
print("%3s %7s %16s %16s %16s %8s %8s" % ("q", "tokens", "k3eval vs llama", "k3 fp32 vs llama",
                                          "k3 int8 vs fp32", "llama", "k3eval"))
for i, r in enumerate(rows):
    print("%3d %7d %16.4f %16.4f %16.4f %8d %8d" % ((i,) + r))
med = lambda xs: sorted(xs)[len(xs) // 2]
col = lambda k: [r[k] for r in rows]
print(f"prompts {n}: identical token ids {same_tokens}/{n}, same greedy next token {same_argmax}/{n}")
print("k3eval vs llama.cpp: median %.4f worst %.4f; k3eval fp32 vs llama.cpp: median %.4f worst "
      "%.4f; k3eval int8 vs its own fp32: median %.4f worst %.4f" %
      (med(col(1)), max(col(1)), med(col(2)), max(col(2)), med(col(3)), max(col(3))))
# The stated tolerance (docs/ENGINE.md, "llama.cpp comparison").
need = n - n // 16
if same_tokens != n or med(col(1)) > 0.02 or max(col(1)) > 0.05 or same_argmax < need:
    print(f"FAIL: outside the stated tolerance (identical ids, median <= 0.02, worst <= 0.05, "
          f"same greedy next token on >= {need}/{n})")
    sys.exit(1)
print("within the stated tolerance")
PY
fi

if [[ $what == layers || $what == all ]]; then
  # (3) Block by block on the first question: where do the engines part?
  run_question layers "$(head -1 "$work/questions.txt")" --layers </dev/null
  python3 - "$work" <<'PY'
import math, re, struct, sys
work = sys.argv[1]
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("%df" % (len(b) // 4), b)
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / max(1e-30, sum(y * y for y in b)))
ours, ours32, llama = (floats(f"{work}/{k}-layers.layers") for k in ("k3", "k3fp32", "llama"))
layers = int(re.search(r"n_layer\s*=\s*(\d+)", open(f"{work}/layers.log").read()).group(1))
size = len(ours) // (3 * layers)
print("relative L2 over every position, per layer (llama.cpp's kda_out / mla_out, ffn_out, l_out):")
print("%5s %-10s %17s %17s %19s" % ("layer", "part", "k3 int8 vs llama", "k3 fp32 vs llama",
                                      "k3 int8 vs k3 fp32"))
for l in range(layers):
    for k, part in enumerate(("attention", "ffn", "stream")):
        s = slice((3 * l + k) * size, (3 * l + k + 1) * size)
        print("%5d %-10s %17.4f %17.4f %19.4f" % (l, part, rel(ours[s], llama[s]),
                                                 rel(ours32[s], llama[s]), rel(ours[s], ours32[s])))
PY
fi

if [[ $what == bench || $what == all ]]; then
  # (4) llama-batched-bench on the default synthetic GGUF (the file bench_engine.sh uses):
  # prefill = PROMPT_LEN-token prompts, decode = DECODE_STEPS tokens after DECODE_PROMPT_LEN.
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

if [[ $what == gsm8k || $what == all ]]; then
  # (5) End to end on the same prompts: SGLang's 5-shot GSM8K prompts (eval/prompt.h: the first
  # five lines of test.jsonl as shots, questions 0..N-1), greedy, stop strings "Question",
  # "Assistant:", "<|separator|>", at most MAX_NEW_TOKENS tokens, all N questions in flight, on
  # THREADS threads: llama.cpp through tests/bench/llama_cpp_gsm8k.cpp (ours, on llama.h:
  # continuous batching of N sequences, as llama-server with N slots, whose final chat parse
  # rejects the synthetic model's non-UTF-8 completions), then k3eval on one rank with
  # --parallel N, with its prefix cache and without (llama.cpp prefills every prompt whole).
  # Output throughput = generated tokens / wall time from the first prompt token to the last
  # answer (k3eval's own figure counts the same way, SGLang's).
  n=${QUESTIONS:-64}
  max_new=${MAX_NEW_TOKENS:-256}
  threads=${THREADS:-1}
  data=$root/../shared/data/gsm8k/test.jsonl
  gsm8k_tool=$work/llama_cpp_gsm8k
  ${CXX:-g++} -std=c++17 -O2 -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$root/tests/bench/llama_cpp_gsm8k.cpp" -L"$LLAMA_CPP_BIN" -lllama -lggml -lggml-base \
    -Wl,-rpath,"$LLAMA_CPP_BIN" -o "$gsm8k_tool"
  python3 - "$data" "$n" >"$work/gsm8k-prompts.bin" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
shots = "".join("Question: " + r["question"] + "\nAnswer: " + r["answer"] + "\n\n" for r in rows[:5])
for r in rows[:int(sys.argv[2])]:
    sys.stdout.write(shots + "Question: " + r["question"] + "\nAnswer:" + "\0")
PY
  echo "GSM8K end to end: $n questions in flight, 5 shots, greedy, at most $max_new new tokens," \
    "$threads thread(s), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "llama.cpp (llama_cpp_gsm8k): $("$gsm8k_tool" "$model" "$work/gsm8k-prompts.bin" "$threads" \
    "$max_new" 2>"$work/gsm8k.log")"
  for cache in on off; do
    extra=()
    [[ $cache == off ]] && extra=(--disable-prefix-cache)
    out=$(mpirun --oversubscribe --bind-to none -np 1 "$bin/k3eval" --model-path "$model" \
      --threads "$threads" --data-path "$data" --num-questions "$n" --parallel "$n" \
      --max-new-tokens "$max_new" "${extra[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
    tokens=$(grep -o '[0-9]* tokens generated' <<<"$out" | tail -1)
    tps=$(awk -F': *' '/^Output throughput/ {print $2}' <<<"$out")
    latency=$(awk -F': *' '/^Latency/ {print $2}' <<<"$out")
    echo "k3eval (1 rank, --parallel $n, prefix cache $cache): ${tokens% generated} in $latency," \
      "output throughput $tps"
  done
fi
