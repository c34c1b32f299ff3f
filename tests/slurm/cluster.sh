#!/usr/bin/env bash
# A real Slurm (munged, slurmctld, one slurmd per node) in a private directory, for the tests
# of jobs/slurm/. No systemd: the daemons are started directly, with their own munge key and
# socket, their own ports, state, pid files, logs and TmpFS under DIR, so they never touch
# /etc/slurm, /etc/munge or another Slurm on the same host. By default one node, this host,
# declares 64 CPUs (SlurmdParameters=config_overrides), so jobs of up to 64 tasks run
# oversubscribed. With K3_SLURM_HOSTS it spans the hosts of tests/multihost/fixture.sh instead.
#
# Usage: tests/slurm/cluster.sh start|stop|kill|status [DIR]
#   DIR defaults to $K3_SLURM_DIR, else build/slurm-cluster in the repository.
#   start   stops whatever a previous run left in DIR, then starts a fresh cluster (new state,
#           random first job id) and waits until `sinfo` shows every node idle.
#   stop    cancels the cluster's jobs, shuts the daemons down and waits until they are gone.
#           Idempotent: a stopped or half-started cluster is fine.
#   kill    stops the daemons at once, without cancelling jobs first (a node whose host was
#           cut off keeps its job completing until SlurmdTimeout).
#   status  prints the daemons and `sinfo`; exit 0 if every node is up, 3 otherwise.
# Clients need SLURM_CONF: `source DIR/env.sh` after start.
# K3_SLURM_PORT=P uses ports P (slurmctld) and P+1 (slurmd) instead of probing for free ones.
# K3_SLURM_HOSTS="HOST=ADDR ..." makes one node per host of tests/multihost/fixture.sh: its slurmd
#   runs in the host's network namespace under the host's name and is reached at ADDR;
#   slurmctld (on this host) listens where the hosts reach it, K3_SLURM_CTLD_ADDR (the bridge's
#   address). K3_SLURM_CPUS=N declares N CPUs per node (default 64).
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cmd=${1:-}
dir=${2:-${K3_SLURM_DIR:-$root/build/slurm-cluster}}
cpus=${K3_SLURM_CPUS:-64}
# The nodes, their addresses and whether each lives in a network namespace of its name.
nodes=(k3node0)
addrs=(127.0.0.1)
in_netns=0
ctld_addr=127.0.0.1
if [[ -n ${K3_SLURM_HOSTS:-} ]]; then
  nodes=()
  addrs=()
  for pair in $K3_SLURM_HOSTS; do
    nodes+=("${pair%%=*}")
    addrs+=("${pair#*=}")
  done
  in_netns=1
  ctld_addr=${K3_SLURM_CTLD_ADDR:?K3_SLURM_HOSTS needs K3_SLURM_CTLD_ADDR}
fi

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

[[ $cmd == start || $cmd == stop || $cmd == kill || $cmd == status ]] || {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# Unix sockets (munge, PMIx) must fit in 108 bytes: a deep build tree is reached through a
# short symlink in /tmp instead.
base=$dir
if [[ ${#dir} -gt 60 ]]; then
  base=/tmp/k3slurm-$(printf %s "$dir" | cksum | cut -d' ' -f1)
fi
conf=$base/etc/slurm.conf
# munged refuses a socket below any directory that not everyone can traverse, which a checkout
# under a private directory (mktemp -d makes 0700 ones) has: the socket gets a directory of its
# own in /tmp.
sockdir=/tmp/k3munge-$(printf %s "$dir" | cksum | cut -d' ' -f1)
socket=$sockdir/munge.socket

# running PID: that process exists and is not a zombie.
running() {
  local state
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z ]]
}

# alive NAME: prints the pid of NAME (munged, slurmctld, slurmd-NODE) if it runs and was started on
# this cluster's files. slurmctld drops its pid file early in a shutdown: wait on pids, not files.
alive() {
  local pid file=$dir/run/$1.pid
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] && running "$pid" || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$base/" || return 1
  echo "$pid"
}

# wait_until SECONDS COMMAND...: polls every 0.2 s; returns 1 on timeout.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# gone PID...: none of them runs any more.
gone() {
  local pid
  for pid in "$@"; do
    running "$pid" && return 1
  done
  return 0
}

# stepds JOBID...: pids of the slurmstepd processes ("slurmstepd: [ID.STEP]") of these jobs.
stepds() {
  local f id cmd
  for f in /proc/[0-9]*/cmdline; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    [[ $cmd =~ ^slurmstepd:\ \[([0-9]+)\. ]] || continue
    for id in "$@"; do
      if [[ ${BASH_REMATCH[1]} == "$id" ]]; then
        f=${f#/proc/}
        echo "${f%/cmdline}"
      fi
    done
  done
}
no_stepds() { [[ -z $(stepds "$@") ]]; }

no_jobs() { [[ -z $(squeue -h -o %i 2>/dev/null) ]]; }
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
# node_state NODE; nodes_idle: every node idle; node_states: "NODE STATE" lines.
node_state() { sinfo -h -n "$1" -o %T 2>/dev/null | head -1; }
nodes_idle() {
  local n
  for n in "${nodes[@]}"; do [[ $(node_state "$n") == idle ]] || return 1; done
}
node_states() { sinfo -h -N -o '%N %T' 2>/dev/null | tr '\n' ';'; }
# await SECONDS NAME COMMAND...: like wait_until, but gives up (dies) as soon as the log of
# daemon NAME (a glob: slurmd-* for every slurmd) shows that it cannot run (a port in use, a bad
# config).
await() {
  local deadline=$((SECONDS + $1)) name=$2 log
  shift 2
  until "$@"; do
    for log in "$dir"/log/$name.log; do
      if grep -qE 'fatal:|Unable to bind listen port' "$log" 2>/dev/null; then
        die "$(basename "$log" .log) failed: $(tail -5 "$log")"
      fi
    done
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# port_free P: no socket uses local port P (any state; without ss: nothing listens on it).
port_free() {
  if command -v ss >/dev/null; then
    [[ -z $(ss -Htan "( sport = :$1 )" 2>/dev/null) ]]
  else
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 1; fi
  fi
}

# A port pair (P, P+1) nobody listens on or talks through, starting from a value derived from
# DIR, so two build trees (or another Slurm on 6817/6818) do not collide.
pick_ports() {
  if [[ -n ${K3_SLURM_PORT:-} ]]; then
    echo "$K3_SLURM_PORT"
    return
  fi
  local p=$((20000 + $(printf %s "$dir" | cksum | cut -d' ' -f1) % 4000 * 2)) i
  for ((i = 0; i < 200; i++, p += 2)); do
    if port_free "$p" && port_free $((p + 1)); then
      echo "$p"
      return
    fi
  done
  die "no free port pair found from $((p - 400))"
}

write_conf() {
  local port=$1 host i
  host=$(hostname -s)
  cat >"$conf" <<EOF
# Generated by tests/slurm/cluster.sh: a private single-host cluster in $dir.
ClusterName=k3test
SlurmctldHost=$host($ctld_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
MailProg=/bin/true
SlurmctldPort=$port
SlurmdPort=$((port + 1))
FirstJobId=$((100000 + (RANDOM * 32768 + RANDOM) % 30000000))
StateSaveLocation=$base/state/ctld
SlurmdSpoolDir=$base/state/d/%n
TmpFS=$base/tmp
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd-%n.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
$(for ((i = 0; i < ${#nodes[@]}; i++)); do
    [[ $in_netns -eq 1 ]] && host=${nodes[i]}
    echo "NodeName=${nodes[i]} NodeHostname=$host NodeAddr=${addrs[i]} CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=16000 State=UNKNOWN"
  done)
PartitionName=k3 Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
InactiveLimit=0
KillWait=10
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
Waittime=0
EOF
  cat >"$dir/env.sh" <<EOF
# Source this to use the cluster in $dir.
export SLURM_CONF=$conf
EOF
}

# kill_pid NAME PID: TERM, then KILL after 15 s.
kill_pid() {
  running "$2" || return 0
  log "stopping $1 (pid $2)"
  kill -TERM "$2" 2>/dev/null || true
  wait_until 15 gone "$2" && return 0
  log "$1 (pid $2) ignored TERM; killing it"
  kill -KILL "$2" 2>/dev/null || true
  wait_until 5 gone "$2" || true
}

stop() {
  [[ $base == "$dir" ]] || ln -sfn "$dir" "$base"
  local ctld slurmds=() munged jobs ids pids file pid
  ctld=$(alive slurmctld) || ctld=
  # Every slurmd this cluster started, whatever nodes the caller names: by their pid files.
  for file in "$dir"/run/slurmd-*.pid; do
    [[ -f $file ]] || continue
    if pid=$(alive "$(basename "$file" .pid)"); then slurmds+=("$pid"); fi
  done
  munged=$(alive munged) || munged=
  export SLURM_CONF=$conf
  if [[ $cmd != kill && -n $ctld && -f $conf ]] && ctld_up; then
    mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
    if [[ ${#jobs[@]} -gt 0 ]]; then
      log "cancelling jobs ${jobs[*]}"
      scancel "${jobs[@]}" 2>/dev/null || true
      wait_until 40 no_jobs || log "jobs still listed 40 s after scancel: $(squeue -h -o '%i %T')"
    fi
    # A job can end before its step daemons have finished cleaning up: wait for them, so that
    # no slurmstepd outlives slurmd and munged.
    mapfile -t ids < <(scontrol show job -o 2>/dev/null | sed -n 's/^JobId=\([0-9]*\) .*/\1/p')
    if [[ ${#ids[@]} -gt 0 ]] && ! wait_until 30 no_stepds "${ids[@]}"; then
      mapfile -t pids < <(stepds "${ids[@]}")
      log "killing step daemons still running 30 s after their jobs: ${pids[*]}"
      kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    scontrol shutdown >/dev/null 2>&1 || true
    wait_until 30 gone "$ctld" "${slurmds[@]}" || log "daemons still up 30 s after 'scontrol shutdown'"
  fi
  for pid in "${slurmds[@]}"; do kill_pid slurmd "$pid"; done
  [[ -z $ctld ]] || kill_pid slurmctld "$ctld"
  if [[ -n $munged ]] && running "$munged"; then
    munged --stop --socket="$socket" >/dev/null 2>&1 || true
    wait_until 10 gone "$munged" || kill_pid munged "$munged"
  fi
  [[ $base == "$dir" ]] || rm -f "$base"
  gone "$ctld" "${slurmds[@]}" "$munged" || die "could not stop the daemons in $dir"
  rm -rf "$sockdir"
}

start() {
  local b
  for b in munged mungekey slurmctld slurmd sinfo scontrol squeue sbatch srun; do
    command -v "$b" >/dev/null || die "$b not found: run jobs/install_deps.sh (slurm-wlm, munge)"
  done
  [[ $(id -u) -eq 0 ]] || die "the private cluster runs its daemons as root (SlurmUser=root)"
  stop
  # A start that fails half-way stops what it started.
  trap 'rc=$?; if [[ $rc -ne 0 ]]; then log "start failed; stopping what was started"; stop || true; fi' EXIT
  [[ $base == "$dir" ]] || ln -sfn "$dir" "$base"
  # Fresh state every start: no old jobs, nodes or job ids.
  rm -rf "${dir:?}"/{state,tmp,run,log,etc,munge}
  mkdir -p "$dir"/{state/ctld,state/d,tmp,run,log,etc,munge}
  for n in "${nodes[@]}"; do mkdir -p "$dir/state/d/$n"; done
  mkdir -p -m 755 "$sockdir"
  local port n
  port=$(pick_ports)
  write_conf "$port"
  export SLURM_CONF=$conf

  mungekey --create --keyfile="$base/munge/munge.key" --bits=1024
  munged --socket="$socket" --key-file="$base/munge/munge.key" --pid-file="$base/run/munged.pid" \
    --log-file="$base/log/munged.log" --seed-file="$base/munge/munged.seed" ||
    die "munged failed: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"
  munge -S "$socket" -n | unmunge -S "$socket" >/dev/null || die "munge -n | unmunge failed"

  slurmctld -f "$conf" || die "slurmctld failed to start: $(tail -5 "$dir/log/slurmctld.log")"
  await 30 slurmctld ctld_up || die "slurmctld not UP after 30 s: $(tail -5 "$dir/log/slurmctld.log")"
  for n in "${nodes[@]}"; do
    if [[ $in_netns -eq 1 ]]; then
      # The node's slurmd (and the step daemons and tasks it starts) in the host's network
      # namespace, under the host's name, as tests/multihost/agent.sh starts Open MPI's daemons.
      # nsenter, not `ip netns exec`: that one mounts a /sys of its own, without the cgroup
      # file systems slurmd reads. Each node gets a TmpFS of its own (PMIx keeps per-step
      # directories there under names that would collide), mounted over the common path.
      mkdir -p "$dir/tmp/$n"
      nsenter --net="/run/netns/$n" unshare --uts --mount --propagation private /bin/sh -c \
        'hostname "$0" && mount --bind "$2/$0" "$2" && exec slurmd -f "$1" -N "$0"' "$n" "$conf" "$base/tmp"
    else
      slurmd -f "$conf" -N "$n"
    fi || die "slurmd of $n failed to start: $(tail -5 "$dir/log/slurmd-$n.log")"
  done
  if ! await 60 'slurmd-*' nodes_idle; then
    log "nodes not all idle after 60 s ($(node_states)); resuming them"
    scontrol update nodename="$(IFS=,; echo "${nodes[*]}")" state=resume 2>/dev/null || true
    await 20 'slurmd-*' nodes_idle || die "nodes not all idle: $(node_states) $(tail -5 "$dir"/log/slurmd-*.log)"
  fi
  trap - EXIT
  log "up in $dir (ports $port/$((port + 1)), $cpus CPUs on each of ${nodes[*]}); source $dir/env.sh"
}

status() {
  local name pid rc=0 n
  for name in munged slurmctld "${nodes[@]/#/slurmd-}"; do
    if pid=$(alive "$name"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=3; fi
  done
  if [[ $rc -eq 0 ]]; then
    export SLURM_CONF=$conf
    sinfo -N -o '%N %T %c' || rc=3
    squeue || true
    for n in "${nodes[@]}"; do [[ $(node_state "$n") =~ ^(idle|mixed|allocated)$ ]] || rc=3; done
  fi
  return $rc
}

case $cmd in
  kill) stop ;;
  *) "$cmd" ;;
esac
