#!/usr/bin/env bash
# End-to-end checks of build/bin/k3eval as a user runs it under mpirun.
# Usage: k3eval_cli_test.sh CASE K3EVAL_BINARY WORK_DIR [K3CKPT_BINARY]
set -uo pipefail
case_name=$1
k3eval=$2
work=$3/$case_name
k3ckpt=${4:-}
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

failures=0
fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }

# run NP ARGS...: runs k3eval on NP ranks (0 = without mpirun), fills $rc, $out, $err.
run() {
  local np=$1; shift
  if [[ $np -eq 0 ]]; then
    timeout 60 "$k3eval" "$@" >"$work/out" 2>"$work/err"
  else
    timeout 120 mpirun --oversubscribe -np "$np" "$k3eval" "$@" >"$work/out" 2>"$work/err"
  fi
  rc=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
}
expect_rc() { [[ $rc -eq $1 ]] || fail "exit code $rc, expected $1; stderr: $err"; }
expect_out() { grep -qF -- "$1" <<<"$out" || fail "stdout lacks '$1'; stdout: $out"; }
# expect_err_once TEXT: TEXT appears on exactly one stderr line.
expect_err_once() {
  local n
  n=$(grep -cF -- "$1" <<<"$err")
  [[ $n -eq 1 ]] || fail "stderr has '$1' $n times, expected once; stderr: $err"
}

production=(--tp 64 --dp 4 --ep 64 --enable-dp-attention --enable-dp-lm-head --ranks-per-node 16)

case $case_name in
  production_layout_64)
    run 64 "${production[@]}" --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp --check-layout
    expect_rc 0
    expect_out "attn-tp              4    16  {0..15} {16..31} {32..47} {48..63}"
    expect_out "moe-ep               1    64  {0..63}"
    expect_out "attn-dp             16     4  {0,16,32,48} {1,17,33,49}"
    expect_out "node                 4    16  {0..15} {16..31} {32..47} {48..63}"
    expect_out "lm-head         vocabulary split 16-way over attn-tp"
    expect_out "dense-mlp       split over attn-tp"
    expect_out "shared-experts  split over attn-tp"
    for n in 0 1 2 3; do expect_out "node $n"; done
    [[ $(grep -c '^node [0-3] ' <<<"$out") -eq 4 ]] || fail "expected four node lines: $out"
    ;;
  dp3_rejected_64)
    run 64 --tp 64 --dp 3 --ep 64 --enable-dp-attention --enable-dp-lm-head --ranks-per-node 16 --check-layout
    expect_rc 2
    expect_err_once "[rank  0/64] [error] invalid parallel layout: --dp 3 must divide --tp 64 under --enable-dp-attention"
    [[ -z $out ]] || fail "a rejected layout printed a table: $out"
    ;;
  unknown_option_8)
    run 8 --check-layout --no-such-option
    expect_rc 2
    expect_err_once "[rank 0/8] [error] unrecognised option '--no-such-option' (see k3eval --help)"
    run 8 --check-layout --tp banana
    expect_rc 2
    expect_err_once "the argument ('banana') for option '--tp' is invalid"
    run 8 --check-layout --threads 0
    expect_rc 2
    expect_err_once "--threads 0 must be >= 1"
    run 8 --check-layout --tp 0
    expect_rc 2
    expect_err_once "[rank 0/8] [error] invalid parallel layout: --tp 0 must be >= 1 (leave --tp out for the world size)"
    ;;
  fatal_one_rank_8)
    start=$(date +%s)
    run 8 --check-layout --debug-fail-rank 3
    elapsed=$(( $(date +%s) - start ))
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "exit code $rc: expected a non-zero code from the abort, not a timeout"
    expect_err_once "[rank 3/8] [critical] fatal: injected failure (--debug-fail-rank 3)"
    [[ $(grep -c "fatal:" <<<"$err") -eq 1 ]] || fail "more than one fatal message: $err"
    [[ -z $out ]] || fail "an aborted job printed a layout table"
    echo "job ended $elapsed s after launch"
    ;;
  fatal_every_rank_8)
    run 8 --check-layout --debug-fail-rank -1
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "exit code $rc: expected a non-zero code from the abort, not a timeout"
    [[ $(grep -c "fatal: injected failure" <<<"$err") -eq 1 ]] ||
      fail "every rank failed; expected one message on this host: $err"
    ;;
  config_file_8)
    printf '# production-like\ntp = 8\ndp = 2\nep = 2\nenable-dp-attention = true\n' >"$work/job.ini"
    run 8 --config "$work/job.ini" --ep 8 --check-layout
    expect_rc 0
    expect_out "layout: world=8 tp=8 dp=2 (DP attention) attn_tp=4 ep=8 moe_tp=1"
    printf 'tp = 8\nbatch = 3\n' >"$work/bad.ini"
    run 8 --config "$work/bad.ini" --check-layout
    expect_rc 2
    expect_err_once "config file '$work/bad.ini': unrecognised option 'batch'"
    ;;
  artifacts_logs_8)
    run 8 --check-layout --artifacts-dir "$work/artifacts" --ranks-per-node 4
    expect_rc 0
    for r in 0 1 2 3 4 5 6 7; do
      f=$work/artifacts/logs/rank-0000$r.log
      [[ -s $f ]] || { fail "missing or empty $f"; continue; }
      grep -qF "[rank $r/8] [info] 7 group kinds built and verified" "$f" || fail "$f lacks rank $r's info lines"
    done
    # Only rank 0 speaks at info level on the console.
    [[ $(grep -c "\[info\]" <<<"$err") -eq $(grep -c "\[rank 0/8\] \[info\]" <<<"$err") ]] ||
      fail "info lines from ranks other than 0 on the console: $err"
    ;;
  singleton)
    run 0 --check-layout
    expect_rc 0
    expect_out "layout: world=1 tp=1 dp=1"
    run 0 --help
    expect_rc 0
    expect_out "--enable-dp-attention"
    run 0
    expect_rc 2
    expect_err_once "the evaluation needs --model-path"
    ;;
  load_only_351_shards_8)
    "$k3ckpt" synth --format hf --shards 351 --out "$work/ck" >/dev/null || fail "synth failed"
    [[ $(ls "$work/ck"/*.safetensors | wc -l) -eq 351 ]] || fail "expected 351 shards"
    run 8 --model-path "$work/ck" --load-only --tp 8 --dp 2 --ep 8 --enable-dp-attention --enable-dp-lm-head \
      --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp --ranks-per-node 4
    expect_rc 0
    expect_out "351/351 shards loaded in"
    expect_out "audit clean on every rank"
    [[ $(grep -c '^rank ' <<<"$out") -eq 8 ]] || fail "expected one line per rank: $out"
    ;;
  plan_only_full_351_shards_64)
    # The production failure at its real scale: 64 ranks pre-flight the full-size ModelSlim
    # checkpoint (header-only, sparse), then the same with layer 55's kv_b_proj renamed in
    # shard 207. Nothing but headers is read either way. The checkpoint is the
    # k3ckpt_synth_full_351_shards fixture's (tests/apps/CMakeLists.txt); this case damages it, so
    # ctest writes it again before every run of this one.
    full=$(dirname "$work")/full-351-modelslim
    if [[ ! -f $full/model.safetensors.index.json ]]; then
      echo "FAIL [$case_name]: no full-size checkpoint in $full (the k3ckpt_synth_full_351_shards test writes it)" >&2
      exit 1
    fi
    run 64 "${production[@]}" --model-path "$full" --plan-only
    expect_rc 0
    expect_out "format: modelslim (quantized_latent_projections, modelslim_quantization, tiktoken_vocabulary)"
    expect_out "plan-only: 351 shards, 746618 tensors, 1329.814 GiB checked without reading tensor data"
    [[ $(grep -c '^rank .* MiB to read from .* shard(s), peak RSS' <<<"$out") -eq 64 ]] ||
      fail "expected one line per rank: $out"
    expect_err_once "[rank  0/64] [info] model $full: format modelslim"
    python3 - "$full" <<'PY' || fail "could not damage the checkpoint"
import json, struct, sys, pathlib
d = pathlib.Path(sys.argv[1])
name = "language_model.model.layers.55.self_attn.kv_b_proj.weight"
shard = d / json.loads((d / "model.safetensors.index.json").read_text())["weight_map"][name]
assert shard.name == "model-00207-of-00351.safetensors", shard
with open(shard, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = f.read(n)
    f.seek(8)
    f.write(header.replace(name.encode(), name.replace("kv_b_proj", "kv_b_lost").encode()))
PY
    run 64 "${production[@]}" --model-path "$full" --plan-only
    expect_rc 2
    expect_err_once "model-00207-of-00351.safetensors, but no shard holds it"
    [[ -z $out ]] || fail "a rejected checkpoint printed a plan: $out"
    ;;
  load_only_formats_8)
    for format in modelslim gguf; do
      "$k3ckpt" synth --format $format --shards 2 --out "$work/$format" >/dev/null || fail "synth $format failed"
      run 8 --model-path "$work/$format" --load-only --tp 8 --dp 2 --ep 8 --enable-dp-attention --enable-dp-lm-head
      expect_rc 0
      expect_out "2/2 shards loaded in"
      expect_err_once "[rank 0/8] [info] model $work/$format: format $format"
      expect_err_once "[rank 0/8] [info] 2/2 shards loaded in"
    done
    ;;
  load_only_with_draft_4)
    "$k3ckpt" synth --format gguf --out "$work/gguf" >/dev/null || fail "synth gguf failed"
    "$k3ckpt" synth --format draft --out "$work/draft" >/dev/null || fail "synth draft failed"
    run 4 --model-path "$work/gguf" --draft-model-path "$work/draft" --load-only --tp 4 --ep 4
    expect_rc 0
    expect_out "draft $work/draft: 62 tensors beside the model, audit clean"
    # A draft that does not fit its target is refused before any tensor data is read, naming the
    # draft's config.json, the key and both values.
    "$k3ckpt" synth --format gguf --set num_hidden_layers=4 --out "$work/gguf4" >/dev/null || fail "synth gguf4 failed"
    run 4 --model-path "$work/gguf4" --draft-model-path "$work/draft" --load-only --tp 4 --ep 4
    expect_rc 2
    expect_err_once "$work/draft/config.json: dflash_config.target_layer_ids taps target layer 4, but the target has 4 layers"
    "$k3ckpt" synth --format gguf --set hidden_size=256 --out "$work/gguf256" >/dev/null || fail "synth gguf256 failed"
    run 4 --model-path "$work/gguf256" --draft-model-path "$work/draft" --load-only --tp 4 --ep 4
    expect_rc 2
    expect_err_once "$work/draft/config.json: draft hidden_size 512 differs from the target's 256"
    run 4 --model-path "$work/draft" --load-only --tp 4
    expect_rc 2
    expect_err_once "$work/draft: --model-path holds a draft model; pass it with --draft-model-path"
    run 4 --model-path "$work/gguf" --draft-model-path "$work/gguf" --load-only --tp 4 --ep 4
    expect_rc 2
    expect_err_once "$work/gguf: no .safetensors shards"
    ;;
  k3ckpt_inspect_draft)
    # One block that says what a DSpark draft holds (and does not), for both presets.
    "$k3ckpt" synth --format draft --shards 3 --out "$work/tiny" >/dev/null || fail "synth tiny draft failed"
    "$k3ckpt" synth --format draft --preset full --header-only --out "$work/full" >/dev/null || fail "synth full draft failed"
    "$k3ckpt" inspect "$work/tiny" >"$work/tiny.txt" || fail "inspect tiny draft failed: $(cat "$work/tiny.txt")"
    "$k3ckpt" inspect "$work/full" >"$work/full.txt" || fail "inspect full draft failed: $(cat "$work/full.txt")"
    cat >"$work/tiny.want" <<'TXT'
format: draft (detected)
capabilities: tiktoken_vocabulary, draft_model
files: 3, tensors: 62, bytes: 33.51 MiB
  BF16         62 tensors 33.51 MiB
draft (DSpark, GQA): hidden 512, 5 layers, 32 Q heads / 16 KV heads of dim 16, MLP 1024, vocab 4352,
  block size 7, mask token 4336, taps target layers 0,1,2,4,5 (stream attn_res) through fc [512, 2560] + hidden_norm,
  Markov head vanilla rank 512, confidence head yes,
  no embedding and no LM head (uses the target's), no MLA kv_b, no split-GGUF K/V, dtype BF16, 17,570,977 parameters
problems: none
TXT
    cat >"$work/full.want" <<'TXT'
format: draft (detected)
capabilities: tiktoken_vocabulary, draft_model
files: 1, tensors: 62, bytes: 4.190 GiB
  BF16         62 tensors 4.190 GiB
draft (DSpark, GQA): hidden 7168, 5 layers, 64 Q heads / 16 KV heads of dim 64, MLP 14336, vocab 163840,
  block size 7, mask token 163824, taps target layers 7,23,51,67,83 (stream attn_res) through fc [7168, 35840] + hidden_norm,
  Markov head vanilla rank 256, confidence head yes,
  no embedding and no LM head (uses the target's), no MLA kv_b, no split-GGUF K/V, dtype BF16, 2,249,289,601 parameters
problems: none
TXT
    for p in tiny full; do
      grep -v -e '^checkpoint: ' -e '^inspected in ' "$work/$p.txt" >"$work/$p.got"
      cmp -s "$work/$p.want" "$work/$p.got" || fail "k3ckpt inspect of the $p draft: $(diff "$work/$p.want" "$work/$p.got")"
    done
    # The speculators convention is refused by name (exit 2).
    python3 - "$work/tiny/config.json" <<'PY' || fail "could not edit the config"
import json, sys
c = json.load(open(sys.argv[1]))
c["speculators_model_type"] = "dspark"
json.dump(c, open(sys.argv[1], "w"))
PY
    "$k3ckpt" inspect "$work/tiny" >/dev/null 2>"$work/err"
    rc=$?
    [[ $rc -eq 2 ]] || fail "a speculators draft must exit 2, got $rc"
    grep -qF "$work/tiny/config.json: key 'speculators_model_type' is \"dspark\"" "$work/err" || fail "message: $(cat "$work/err")"
    ;;
  help_every_command)
    # Every subcommand of every binary answers --help with its own usage, options and an
    # example (before checking any option, a required one included), and exits 0.
    k3report=$(dirname "$k3eval")/k3report
    for tool in "k3ckpt synth" "k3ckpt inspect" "k3ckpt plan" "k3ckpt tokenize" "k3ckpt mutants" \
                "k3report trend" "k3report compare" "k3report check" "k3report plot"; do
      binary=$k3ckpt
      [[ $tool == k3report* ]] && binary=$k3report
      "$binary" ${tool#* } --help >"$work/out" 2>"$work/err"
      rc=$?
      [[ $rc -eq 0 ]] || fail "$tool --help: exit code $rc; $(cat "$work/err")"
      grep -q "^usage: .*${tool#* }" "$work/out" || fail "$tool --help: no usage line: $(head -3 "$work/out")"
      grep -qx "example:" "$work/out" || fail "$tool --help: no example"
      grep -q -- "--" "$work/out" || fail "$tool --help: no options"
      "$binary" ${tool#* } -h >"$work/out_h" 2>&1 && cmp -s "$work/out" "$work/out_h" || fail "$tool -h differs from --help"
    done
    "$k3ckpt" --help | grep -q "k3ckpt COMMAND --help" || fail "k3ckpt --help does not point at the commands' help"
    # The mutants: listed per format; an unknown one is refused naming the known ones.
    "$k3ckpt" mutants --format gguf >"$work/mutants" || fail "k3ckpt mutants failed"
    grep -q "^gguf_block_scale" "$work/mutants" && ! grep -q "^modelslim_scale" "$work/mutants" ||
      fail "k3ckpt mutants --format gguf: $(cat "$work/mutants")"
    "$k3ckpt" synth --mutant no_such --out "$work/m" >"$work/out" 2>&1
    rc=$?
    [[ $rc -eq 2 ]] && grep -q "mutant 'no_such' is not one of mla_o_proj" "$work/out" ||
      fail "synth --mutant no_such: exit $rc: $(cat "$work/out")"
    "$k3report" --help | grep -q "k3report COMMAND --help" || fail "k3report --help does not point at the commands' help"
    for args in "--help" "score --help" "logits --help"; do
      run 0 $args
      expect_rc 0
      expect_out "Exit codes:"
      expect_out "Artifacts (--artifacts-dir DIR"
      expect_out "questions.jsonl"
    done
    ;;
  k3ckpt_tokenize)
    "$k3ckpt" synth --format hf --out "$work/hf" >/dev/null || fail "synth hf failed"
    "$k3ckpt" synth --format gguf --out "$work/gguf" --shards 2 >/dev/null || fail "synth gguf failed"
    printf 'Natalia sold clips to 48 of her friends in April.\nHow much is 1234567 + 89?\n\n<|end_of_msg|> stays text\n' >"$work/in.txt"
    "$k3ckpt" tokenize "$work/hf" <"$work/in.txt" >"$work/ids.txt" || fail "tokenize failed"
    "$k3ckpt" tokenize "$work/gguf/kimi-k3-tiny-00001-of-00002.gguf" <"$work/in.txt" >"$work/ids_gguf.txt" || fail "tokenize gguf failed"
    cmp -s "$work/ids.txt" "$work/ids_gguf.txt" || fail "tiktoken.model and GGUF give different ids"
    [[ $(wc -l <"$work/ids.txt") -eq 4 ]] || fail "expected one line of ids per input line"
    [[ $(sed -n 3p "$work/ids.txt") == "" ]] || fail "an empty line must give an empty line of ids"
    grep -qw 4098 "$work/ids.txt" && fail "<|end_of_msg|> became a special id without --allow-special"
    "$k3ckpt" tokenize "$work/gguf" --decode <"$work/ids.txt" >"$work/out.txt" || fail "decode failed"
    cmp -s "$work/in.txt" "$work/out.txt" || fail "decode(encode(text)) differs: $(diff "$work/in.txt" "$work/out.txt")"
    echo "<|end_of_msg|>" | "$k3ckpt" tokenize "$work/hf" --allow-special | grep -qx 4098 || fail "--allow-special"
    echo "12 x 7" | "$k3ckpt" tokenize "$work/hf" --decode >/dev/null 2>"$work/err"
    rc=$?
    [[ $rc -eq 2 ]] || fail "a bad id must exit 2, got $rc"
    grep -qF "stdin line 1: 'x' is not a token id below 4352" "$work/err" || fail "bad id message: $(cat "$work/err")"
    ;;
  k3ckpt_router_margin)
    # Fixed routing: the favoured experts' routing bias is raised by the margin in every format.
    "$k3ckpt" synth --format hf --out "$work/plain" >/dev/null || fail "synth failed"
    "$k3ckpt" synth --format hf --router-margin 4 --out "$work/routed" >/dev/null || fail "synth --router-margin failed"
    python3 - "$work" <<'PY' || fail "router margin not as documented"
import json, struct, sys, pathlib
def biases(d):
    d = pathlib.Path(d)
    raw = (d / json.loads((d / "model.safetensors.index.json").read_text())["weight_map"][
        "language_model.model.layers.1.block_sparse_moe.gate.e_score_correction_bias"]).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    info = json.loads(raw[8:8 + n])["language_model.model.layers.1.block_sparse_moe.gate.e_score_correction_bias"]
    a, b = info["data_offsets"]
    data = raw[8 + n + a:8 + n + b]
    return struct.unpack("<%df" % (len(data) // 4), data)
plain, routed = biases(sys.argv[1] + "/plain"), biases(sys.argv[1] + "/routed")
raised = [e for e, (p, r) in enumerate(zip(plain, routed)) if r != p]
config = json.loads((pathlib.Path(sys.argv[1]) / "routed/config.json").read_text())
k = config.get("text_config", config)["num_experts_per_token"]
assert len(raised) == k, (raised, k)
assert all(abs(routed[e] - plain[e] - 4) < 1e-6 for e in raised)
PY
    for bad in -1 nan inf; do
      "$k3ckpt" synth --format hf --router-margin "$bad" --out "$work/bad" >/dev/null 2>"$work/err"
      rc=$?
      [[ $rc -eq 2 ]] || fail "--router-margin $bad must exit 2, got $rc"
      grep -qF -- "--router-margin must be a finite number >= 0" "$work/err" || fail "message: $(cat "$work/err")"
    done
    ;;
  load_only_rejects_before_reading_8)
    "$k3ckpt" synth --format modelslim --out "$work/ms" >/dev/null || fail "synth failed"
    # Drop kv_b_proj from the description and the header's view: rename the tensor in place.
    python3 - "$work/ms" <<'PY' || fail "could not damage the checkpoint"
import json, struct, sys, pathlib
d = pathlib.Path(sys.argv[1])
name = "language_model.model.layers.5.self_attn.kv_b_proj.weight"
shard = d / json.loads((d / "model.safetensors.index.json").read_text())["weight_map"][name]
raw = shard.read_bytes()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header[name.replace("kv_b_proj", "kv_b_lost")] = header.pop(name)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
shard.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
index = json.loads((d / "model.safetensors.index.json").read_text())
index["weight_map"][name.replace("kv_b_proj", "kv_b_lost")] = index["weight_map"].pop(name)
(d / "model.safetensors.index.json").write_text(json.dumps(index))
PY
    run 8 --model-path "$work/ms" --load-only --tp 8 --ep 8
    expect_rc 2
    expect_err_once "problem(s) found before reading any tensor data"
    expect_err_once "missing tensor 'language_model.model.layers.5.self_attn.kv_b_proj.weight'"
    grep -q "shards," <<<"$err" && fail "data was read before the check failed: $err"
    ;;
  load_only_json_overflow_2)
    # A number too large for JSON in either small file: exit 2 naming it, not an internal error.
    "$k3ckpt" synth --format modelslim --out "$work/ms" >/dev/null || fail "synth failed"
    cp -r "$work/ms" "$work/ms-config"
    sed -i '0,/"hidden_size": [0-9]*/s//"hidden_size": 1e99999/' "$work/ms-config/config.json"
    run 2 --model-path "$work/ms-config" --load-only --tp 2
    expect_rc 2
    expect_err_once "$work/ms-config/config.json: invalid JSON: number overflow parsing '1e99999'"
    grep -q "unexpected error" <<<"$err" && fail "reported as an internal error: $err"
    sed -i '0,/"group_size": [0-9]*/s//"group_size": 1e99999/' "$work/ms/quant_model_description.json"
    run 2 --model-path "$work/ms" --load-only --tp 2
    expect_rc 2
    expect_err_once "$work/ms/quant_model_description.json: invalid JSON: number overflow parsing '1e99999'"
    ;;
  *)
    fail "unknown case"
    ;;
esac

if [[ $failures -ne 0 ]]; then
  echo "$case_name: $failures check(s) failed" >&2
  exit 1
fi
echo "$case_name: ok"
