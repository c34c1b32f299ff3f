#!/usr/bin/env bash
# Load throughput and peak memory of `k3eval --load-only` against reading the same shards with
# cat from the page cache. Synthesizes a medium checkpoint (tiny shapes, 12 layers, 256 experts,
# about 350 MiB) into build/bench/ once.
# Usage: tests/bench/bench_load.sh [ranks ...]   (default: 1 2 8)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ck=$root/build/bench/medium-hf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
if [[ ! -f $ck/config.json ]]; then
  "$root/build/bin/k3ckpt" synth --format hf --shards 8 --set num_hidden_layers=12 --set num_experts=256 --out "$ck"
fi
bytes=$(cat "$ck"/*.safetensors | wc -c)
cat "$ck"/*.safetensors >/dev/null  # warm the page cache
t0=$(date +%s.%N); cat "$ck"/*.safetensors >/dev/null; t1=$(date +%s.%N)
echo "machine: $(nproc) cores, $(date -u +%F), load average $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v b="$bytes" -v a="$t0" -v c="$t1" 'BEGIN { printf "cat (page cache): %.1f MiB in %.3f s = %.2f GB/s\n", b / 1048576, c - a, b / (c - a) / 1e9 }'
for np in "${@:-1 2 8}"; do
  for n in $np; do
    out=$(mpirun --oversubscribe -np "$n" "$root/build/bin/k3eval" --model-path "$ck" --load-only \
      --tp "$n" --ep "$n" --log-level warn 2>/dev/null)
    echo "$out" | awk -v n="$n" '
      /^rank/ { mib += $3; if ($11 > rss) rss = $11; if ($14 > t) t = $14; slice = $3 }
      END { printf "k3eval --load-only, %d rank(s): %.1f MiB read, slowest rank %.3f s = %.2f GB/s total; peak RSS %.1f MiB for a %.1f MiB slice\n", n, mib, t, mib * 1048576 / t / 1e9, rss, slice }'
  done
done
