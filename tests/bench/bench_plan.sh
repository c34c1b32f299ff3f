#!/usr/bin/env bash
# The control plane at job scale: `k3eval --plan-only` (every header read once, one binding, every
# rank's plan) on full-size Kimi-K3 checkpoints written header-only (sparse files: real headers,
# no data), with the production layout (TP = EP = ranks, DP4 with DP attention, DP LM head, shared
# experts and dense MLP over attention TP, as jobs/configs/production.ini),
# on 4 simulated nodes, oversubscribed on this host. For each rank count it also times an empty
# job of the same size (`k3eval --check-layout`: MPI start, groups, exit), the launcher's floor,
# and the broken variant of the production failure (a kv_b_proj renamed in shard 207 of 351),
# which must be rejected with exit 2.
#
# Usage: tests/bench/bench_plan.sh [format ...]   (default: modelslim hf gguf)
#   RANKS="8 16 64"   rank counts (each divisible by 4)
#   GGUF_SPLITS=64    files of the GGUF set
# Checkpoints go to build/bench/plan-<format>/ once (about 1.3 TB apparent, 0.2-0.3 GB on disk).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
k3eval=$root/build/bin/k3eval
k3ckpt=$root/build/bin/k3ckpt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
formats=("${@:-modelslim hf gguf}")
read -ra formats <<<"${formats[*]}"
read -ra ranks <<<"${RANKS:-8 16 64}"
bench=$root/build/bench

checkpoint() {  # checkpoint FORMAT: the full header-only checkpoint's path, written once
  local dir=$bench/plan-$1 shards=351
  [[ $1 == gguf ]] && shards=${GGUF_SPLITS:-64}
  if [[ ! -f $dir/.complete ]]; then
    rm -rf "$dir"
    "$k3ckpt" synth --preset full --format "$1" --header-only --shards "$shards" --out "$dir" >/dev/null
    touch "$dir/.complete"
  fi
  echo "$dir"
}

broken_checkpoint() {  # the modelslim checkpoint with layer 55's kv_b_proj renamed in its shard
  local good=$1 dir=$bench/plan-modelslim-broken
  if [[ ! -f $dir/.complete ]]; then
    rm -rf "$dir" && cp -r --sparse=always "$good" "$dir"
    python3 - "$dir" <<'PY'
import json, struct, sys, pathlib
d = pathlib.Path(sys.argv[1])
name = "language_model.model.layers.55.self_attn.kv_b_proj.weight"
index = json.loads((d / "model.safetensors.index.json").read_text())
shard = d / index["weight_map"][name]
with open(shard, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = f.read(n)
    renamed = header.replace(name.encode(), name.replace("kv_b_proj", "kv_b_lost").encode())
    assert len(renamed) == len(header) and renamed != header
    f.seek(8)
    f.write(renamed)
PY
    touch "$dir/.complete"
  fi
  echo "$dir"
}

layout() {  # layout N: the production layout scaled to N ranks
  echo "--tp $1 --dp 4 --ep $1 --enable-dp-attention --enable-dp-lm-head --enable-shared-experts-attn-tp --enable-dense-mlp-attn-tp --ranks-per-node $(($1 / 4))"
}

timed() {  # timed CMD...: runs it, sets $seconds, $rc, $out
  local t0 t1
  t0=$(date +%s.%N)
  set +e
  out=$("$@" 2>"$bench/plan.err")
  rc=$?
  set -e
  t1=$(date +%s.%N)
  seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}

rss_stats() {  # median and largest peak RSS (MiB) of the per-rank lines of --plan-only
  awk '/^rank .*peak RSS/ { print $(NF-1) }' <<<"$out" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) printf "RSS median %.1f MiB, largest %.1f MiB", v[int((NR + 1) / 2)], v[NR] }'
}

mkdir -p "$bench"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ { print $2 }') GiB, $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
for format in "${formats[@]}"; do
  ck=$(checkpoint "$format")
  echo "== $format: $(find "$ck" -name '*.safetensors' -o -name '*.gguf' | wc -l) files, $(du -sh --apparent-size "$ck" | cut -f1) apparent, $(du -sh "$ck" | cut -f1) on disk"
  for n in "${ranks[@]}"; do
    # shellcheck disable=SC2046
    timed mpirun --oversubscribe -np "$n" "$k3eval" $(layout "$n") --check-layout --log-level warn
    floor=$seconds
    # shellcheck disable=SC2046
    timed mpirun --oversubscribe -np "$n" "$k3eval" $(layout "$n") --model-path "$ck" --plan-only --log-level warn
    [[ $rc -eq 0 ]] || { echo "plan-only failed (exit $rc):" >&2; cat "$bench/plan.err" >&2; exit 1; }
    echo "$n ranks: --plan-only $seconds s wall (empty job of $n ranks: $floor s), $(rss_stats)"
    echo "  $(grep '^plan-only:' <<<"$out")"
    if [[ $format == modelslim ]]; then
      broken=$(broken_checkpoint "$ck")
      # shellcheck disable=SC2046
      timed mpirun --oversubscribe -np "$n" "$k3eval" $(layout "$n") --model-path "$broken" --plan-only --log-level warn
      [[ $rc -eq 2 ]] || { echo "the broken checkpoint gave exit $rc, expected 2" >&2; exit 1; }
      echo "  broken (kv_b_proj renamed in shard 207): rejected in $seconds s, exit $rc: $(grep -m1 -oE "(missing tensor '[^']*'|weight_map puts '[^']*' in [^,]*, but no shard holds it)" "$bench/plan.err")"
    fi
  done
done
