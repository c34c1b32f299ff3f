#!/usr/bin/env bash
# Times ./jobs/quickstart.sh on a fresh machine: a bare Debian 12 (debootstrap, minbase) holding
# what a new machine of this kind has (g++, cmake, git, GoogleTest, Google Benchmark and the
# host's /etc/hosts), a clean clone of this repository at HEAD with ../shared/data beside it,
# and none of k3eval's packages; the quickstart installs them, builds, writes the checkpoint and
# runs the job. Prints its stage lines, the time to the report, and the count of carriage returns
# in the redirected log (0 expected); then runs it a second time.
# Usage (root, network to deb.debian.org): tests/bench/bench_fresh_quickstart.sh [WORK_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:-/tmp/k3-fresh}
fresh=$work/root
[[ $(id -u) -eq 0 ]] || { echo "bench_fresh_quickstart: needs root (debootstrap, chroot)" >&2; exit 2; }
unmount() { for m in dev sys proc; do umount -l "$fresh/$m" 2>/dev/null || true; done; }
trap unmount EXIT
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
base=$work/base.tar
if [[ ! -f $base ]]; then
  echo "bench_fresh_quickstart: making the base system in $base (once)" >&2
  rm -rf "$fresh" && mkdir -p "$fresh"
  debootstrap --variant=minbase bookworm "$fresh" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1
  cp /etc/resolv.conf "$fresh/etc/resolv.conf"
  chroot "$fresh" apt-get update -qq
  chroot "$fresh" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    g++ cmake git ca-certificates libgtest-dev libgmock-dev libbenchmark-dev procps >/dev/null
  chroot "$fresh" apt-get clean
  tar -C "$fresh" -cf "$base" .
fi
unmount
rm -rf "$fresh" && mkdir -p "$fresh" && tar -C "$fresh" -xf "$base"
cp /etc/hosts /etc/hostname "$fresh/etc/"  # a real machine resolves its own name
mkdir -p "$fresh/work/shared"
cp -r "$root/../shared/data" "$fresh/work/shared/"
git clone -q "$root" "$fresh/work/k3eval"
mount -t proc proc "$fresh/proc"
mount --rbind /sys "$fresh/sys"
mount --rbind /dev "$fresh/dev"
for run in 1 2; do
  t0=$SECONDS
  rc=0
  chroot "$fresh" bash -c 'cd /work/k3eval && ./jobs/quickstart.sh' >"$work/run$run.log" 2>&1 || rc=$?
  echo "== run $run: exit $rc, $((SECONDS - t0)) s, carriage returns in the log: $(grep -c $'\r' "$work/run$run.log")"
  grep -E '^\[[0-9:]+ \+ *[0-9]+s\]|^Golden tokens|^Status' "$work/run$run.log"
done
