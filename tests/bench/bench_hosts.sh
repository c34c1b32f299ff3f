#!/usr/bin/env bash
# Where the time goes between hosts: the quickstart's layout (8 ranks, tp 8, dp 2, ep 8, DP
# attention) on 1 host x 8, 2 hosts x 4 and 4 hosts x 2 ranks made by tests/multihost/fixture.sh,
# each with no limit and with every host's egress limited to RATE, the configurations alternated
# in each repetition. Prints, per configuration, the output throughput of every run and the
# Collectives block (time in collectives per kind of traffic, bytes per step) of its median run.
# Needs root and iproute2, as the multi-host tests do.
# Usage: tests/bench/bench_hosts.sh [repetitions] [rate]   (after jobs/build.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
reps=${1:-3}
rate=${2:-1gbit}
k3eval=$root/build/bin/k3eval
ck=$root/build/tests/model/scratch/tiny-hf
data=$root/../shared/data/gsm8k/test.jsonl
[[ -x $k3eval && -d $ck ]] || { echo "build first (jobs/build.sh; ctest -R synth_tiny_hf)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# shellcheck source=tests/multihost/fixture.sh
source "$root/tests/multihost/fixture.sh"
work=$(mktemp -d /tmp/bench_hosts.XXXXXX)

configs=("1x8" "2x4" "4x2" "1x8@$rate" "2x4@$rate" "4x2@$rate")
run_config() {  # CONFIG REP
  local config=$1 rep=$2 shape limit hosts slots
  shape=${config%@*}
  limit=""
  [[ $config == *@* ]] && limit=${config#*@}
  hosts=${shape%x*}
  slots=${shape#*x}
  mh_up "$hosts" $limit >/dev/null
  mh_slots "$slots"
  mpirun "${MH_MPIRUN_ARGS[@]}" --map-by slot --oversubscribe -np 8 "$k3eval" \
    --config "$root/jobs/configs/quickstart.ini" --ranks-per-node 0 --model-path "$ck" \
    --data-path "$data" --progress log >"$work/$config.$rep.out" 2>"$work/$config.$rep.err" ||
    { echo "$config: k3eval failed: $(tail -3 "$work/$config.$rep.err")" >&2; mh_down; exit 1; }
  mh_down
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
for ((rep = 0; rep < reps; rep++)); do
  for config in "${configs[@]}"; do run_config "$config" "$rep"; done
done
for config in "${configs[@]}"; do
  # Each run's output throughput; the median run's Collectives block.
  mapfile -t runs < <(for ((rep = 0; rep < reps; rep++)); do
    printf '%s %s\n' "$(sed -nE 's/^Output throughput: ([0-9.]+) token\/s$/\1/p' "$work/$config.$rep.out")" "$rep"
  done | sort -n)
  median=${runs[$(((reps - 1) / 2))]#* }
  echo
  echo "== $config (hosts x ranks per host[@egress limit per host]): output throughput $(printf '%s ' "${runs[@]%% *}")token/s"
  sed -n '/^Collectives:/,/^  all /p' "$work/$config.$median.out"
done
rm -rf "$work"
