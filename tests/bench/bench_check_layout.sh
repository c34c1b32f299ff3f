#!/usr/bin/env bash
# Wall time of `k3eval --check-layout` (process start, MPI_Init, node discovery, 6 communicator
# splits, their verification, the table, MPI_Finalize) at 64 and 8 oversubscribed ranks.
# Usage: tests/bench/bench_check_layout.sh [repetitions]   (after jobs/build.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
reps=${1:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

measure() {
  local label=$1; shift
  local times=()
  for ((i = 0; i < reps; i++)); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v label="$label" -v cmd="$*" '
    { t[NR] = $1 }
    END { printf "%-6s min %.2f s  median %.2f s  max %.2f s  (%d runs)\n  %s\n", label, t[1], t[int((NR + 1) / 2)], t[NR], NR, cmd }'
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
measure np64 mpirun --oversubscribe -np 64 "$root/build/bin/k3eval" --tp 64 --dp 4 --ep 64 \
  --enable-dp-attention --enable-dp-lm-head --ranks-per-node 16 --check-layout
measure np8 mpirun --oversubscribe -np 8 "$root/build/bin/k3eval" --tp 8 --dp 2 --ep 8 \
  --enable-dp-attention --enable-dp-lm-head --ranks-per-node 4 --check-layout
