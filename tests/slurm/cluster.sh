#!/usr/bin/env bash
# A real single-host Slurm (munged, slurmctld, one slurmd) in a private directory, for the tests
# of jobs/slurm/. No systemd: the daemons are started directly, with their own munge key and
# socket, their own ports, state, pid files, logs and TmpFS under DIR, so they never touch
# /etc/slurm, /etc/munge or another Slurm on the same host. The one node declares 64 CPUs
# (SlurmdParameters=config_overrides), so jobs of up to 64 tasks run oversubscribed.
#
# Usage: tests/slurm/cluster.sh start|stop|status [DIR]
#   DIR defaults to $K3_SLURM_DIR, else build/slurm-cluster in the repository.
#   start   stops whatever a previous run left in DIR, then starts a fresh cluster (new state,
#           random first job id) and waits until `sinfo` shows the node idle.
#   stop    cancels the cluster's jobs, shuts the daemons down and waits until they are gone.
#           Idempotent: a stopped or half-started cluster is fine.
#   status  prints the daemons and `sinfo`; exit 0 if the node is up, 3 otherwise.
# Clients need SLURM_CONF: `source DIR/env.sh` after start.
# K3_SLURM_PORT=P uses ports P (slurmctld) and P+1 (slurmd) instead of probing for free ones.
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cmd=${1:-}
dir=${2:-${K3_SLURM_DIR:-$root/build/slurm-cluster}}
node=k3node0
cpus=64

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

[[ $cmd == start || $cmd == stop || $cmd == status ]] || {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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

# alive NAME: prints the pid of NAME (munged, slurmctld, slurmd) if it runs and was started on
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
node_state() { sinfo -h -n "$node" -o %T 2>/dev/null | head -1; }
node_idle() { [[ $(node_state) == idle ]]; }
# await SECONDS NAME COMMAND...: like wait_until, but gives up (dies) as soon as the log of
# daemon NAME shows that it cannot run (a port in use, a bad config).
await() {
  local deadline=$((SECONDS + $1)) name=$2
  shift 2
  until "$@"; do
    if grep -qE 'fatal:|Unable to bind listen port' "$dir/log/$name.log" 2>/dev/null; then
      die "$name failed: $(tail -5 "$dir/log/$name.log")"
    fi
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
  local port=$1 host
  host=$(hostname -s)
  cat >"$conf" <<EOF
# Generated by tests/slurm/cluster.sh: a private single-host cluster in $dir.
ClusterName=k3test
SlurmctldHost=$host(127.0.0.1)
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
SlurmdSpoolDir=$base/state/d
TmpFS=$base/tmp
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
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
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=16000 State=UNKNOWN
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
  local ctld slurmd munged jobs ids pids
  ctld=$(alive slurmctld) || ctld=
  slurmd=$(alive slurmd) || slurmd=
  munged=$(alive munged) || munged=
  export SLURM_CONF=$conf
  if [[ -n $ctld && -f $conf ]] && ctld_up; then
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
    wait_until 30 gone "$ctld" "$slurmd" || log "daemons still up 30 s after 'scontrol shutdown'"
  fi
  [[ -z $slurmd ]] || kill_pid slurmd "$slurmd"
  [[ -z $ctld ]] || kill_pid slurmctld "$ctld"
  if [[ -n $munged ]] && running "$munged"; then
    munged --stop --socket="$socket" >/dev/null 2>&1 || true
    wait_until 10 gone "$munged" || kill_pid munged "$munged"
  fi
  [[ $base == "$dir" ]] || rm -f "$base"
  gone "$ctld" "$slurmd" "$munged" || die "could not stop the daemons in $dir"
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
  mkdir -p -m 755 "$sockdir"
  local port
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
  slurmd -f "$conf" -N "$node" || die "slurmd failed to start: $(tail -5 "$dir/log/slurmd.log")"
  if ! await 60 slurmd node_idle; then
    log "node $node is '$(node_state)' after 60 s; resuming it"
    scontrol update nodename="$node" state=resume 2>/dev/null || true
    await 20 slurmd node_idle || die "node $node is '$(node_state)', not idle: $(tail -5 "$dir/log/slurmd.log")"
  fi
  trap - EXIT
  log "up in $dir (ports $port/$((port + 1)), $cpus CPUs on $node); source $dir/env.sh"
}

status() {
  local name pid rc=0
  for name in munged slurmctld slurmd; do
    if pid=$(alive "$name"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=3; fi
  done
  if [[ $rc -eq 0 ]]; then
    export SLURM_CONF=$conf
    sinfo -N -o '%N %T %c' || rc=3
    squeue || true
    [[ $(node_state) =~ ^(idle|mixed|allocated)$ ]] || rc=3
  fi
  return $rc
}

"$cmd"
