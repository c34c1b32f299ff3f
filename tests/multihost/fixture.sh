# Several hosts on one Linux machine, for tests of k3eval across hosts. Source this file, then:
#
#   mh_up N [RATE]    makes hosts ${MH_HOSTS[@]}: one network namespace each, named and
#                     hostnamed k3h<slot>n<i>, its eth0 a veth into a bridge k3br<slot> on
#                     10.213.<slot>.0/24 (the bridge holds .1, host i holds .(10+i)); RATE (a tc
#                     rate such as 1gbit) limits every host's egress. It writes a hostfile
#                     ($MH_HOSTFILE, one line "HOST slots=S" per host once mh_slots S is called)
#                     and fills MH_MPIRUN_ARGS with what mpirun needs to launch across them
#                     (add --map-by slot: k3eval wants each host's ranks in one block).
#                     It installs mh_down as the EXIT, INT and TERM trap.
#   mh_slots S        S slots per host in the hostfile
#   mh_slurm_up DIR CPUS  a Slurm cluster (tests/slurm/cluster.sh) in DIR with one node per host,
#                     CPUS CPUs each, its slurmd in the host's namespaces; sources DIR/env.sh.
#                     mh_down stops it at once.
#   mh_down           removes everything mh_up made and every process in it, the mpirun of
#                     this fixture included (idempotent)
#   mh_cut H          cuts host H's link (its port on the bridge goes down)
#   mh_kill H         SIGKILLs every process of host H (its daemon and its ranks)
#   mh_stop H         SIGSTOPs every k3eval process of host H
#   mh_pids H         the pids of host H's processes
#   mh_leftovers      prints the k3eval, orted and mpirun processes of this fixture still alive
#   mh_ranks_alive    prints the k3eval processes still alive on the hosts
#
# Needs root and iproute2 (ip, tc) and util-linux (unshare); mh_up fails with the reason when one
# is missing, so that a test cannot pass without having run. Open MPI's rsh launcher starts one
# daemon per host through tests/multihost/agent.sh, which enters the host's namespaces.

mh_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MH_HOSTS=()
MH_MPIRUN_ARGS=()
MH_SLOT=""
MH_HOSTFILE=""
MH_STATE=""
MH_SLURM_DIR=""

mh_fail() { echo "multihost fixture: $*" >&2; return 1; }

# A free slot (0..63) for this fixture's names and subnet, held by an open lock file until the
# shell ends, so that fixtures running at the same time never share a bridge or a subnet.
mh_take_slot() {
  mkdir -p /run/k3-multihost
  local s
  for s in $(seq 0 63); do
    exec {MH_LOCK_FD}>"/run/k3-multihost/slot-$s.lock"
    if flock -n "$MH_LOCK_FD"; then
      MH_SLOT=$s
      return 0
    fi
    exec {MH_LOCK_FD}>&-
  done
  mh_fail "all 64 slots in /run/k3-multihost are taken"
}

mh_up() {
  local count=$1 rate=${2:-}
  [[ $(id -u) -eq 0 ]] || { mh_fail "needs root to make network namespaces (running as uid $(id -u))"; return 1; }
  local tool
  for tool in ip tc unshare flock; do
    command -v "$tool" >/dev/null || { mh_fail "needs '$tool' (Debian packages iproute2, util-linux)"; return 1; }
  done
  mh_take_slot || return 1
  trap mh_down EXIT
  trap 'mh_down; exit 130' INT
  trap 'mh_down; exit 143' TERM
  MH_STATE=$(mktemp -d /tmp/k3-multihost-$MH_SLOT.XXXXXX)
  MH_HOSTFILE=$MH_STATE/hostfile
  local net=10.213.$MH_SLOT bridge=k3br$MH_SLOT
  mh_down_names "$MH_SLOT"  # a fixture killed by SIGKILL may have left this slot's names
  ip link add "$bridge" type bridge stp_state 0 forward_delay 0 ||
    { mh_fail "cannot make bridge $bridge (ip link add ... type bridge)"; return 1; }
  ip addr add "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i host port
  for ((i = 0; i < count; i++)); do
    host=k3h${MH_SLOT}n$i
    port=k3v${MH_SLOT}n$i
    ip netns add "$host" || { mh_fail "cannot make network namespace $host (ip netns add)"; return 1; }
    ip link add "$port" type veth peer name eth0 netns "$host"
    ip link set "$port" master "$bridge"
    ip link set "$port" up
    ip -n "$host" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$host" link set lo up
    ip -n "$host" link set eth0 up
    ip -n "$host" route add default via "$net.1"
    if [[ -n $rate ]]; then
      ip netns exec "$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 50ms ||
        { mh_fail "cannot limit $host to $rate (tc tbf)"; return 1; }
    fi
    MH_HOSTS+=("$host")
  done
  # With STP off a bridge port forwards as soon as it is up (state 3); wait for all of them.
  local tries=0
  for ((i = 0; i < count; i++)); do
    while [[ $(cat "/sys/class/net/k3v${MH_SLOT}n$i/brport/state" 2>/dev/null) != 3 ]]; do
      ((++tries < 100)) || { mh_fail "bridge port k3v${MH_SLOT}n$i never forwards"; return 1; }
      sleep 0.05
    done
  done
  mh_slots 1
  MH_MPIRUN_ARGS=(--hostfile "$MH_HOSTFILE"
    --mca plm rsh --mca plm_rsh_agent "$mh_dir/agent.sh" --mca plm_rsh_no_tree_spawn 1
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24"
    --mca btl tcp,vader,self)
}

mh_slots() {
  local host
  : >"$MH_HOSTFILE"
  for host in "${MH_HOSTS[@]}"; do echo "$host slots=$1" >>"$MH_HOSTFILE"; done
}

mh_slurm_up() {
  local dir=$1 cpus=$2 i hosts=""
  for ((i = 0; i < ${#MH_HOSTS[@]}; i++)); do hosts+="${MH_HOSTS[i]}=10.213.$MH_SLOT.$((10 + i)) "; done
  MH_SLURM_DIR=$dir
  K3_SLURM_HOSTS=$hosts K3_SLURM_CTLD_ADDR=10.213.$MH_SLOT.1 K3_SLURM_CPUS=$cpus \
    "$mh_dir/../slurm/cluster.sh" start "$dir" || { mh_fail "the Slurm cluster in $dir did not start"; return 1; }
  # shellcheck source=/dev/null
  source "$dir/env.sh"
}

mh_pids() { ip netns pids "$1" 2>/dev/null; }

mh_cut() { ip link set "k3v${MH_SLOT}n${1##*n}" down; }

mh_kill() {
  local pids
  pids=$(mh_pids "$1")
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}

mh_stop() {
  local pid
  for pid in $(mh_pids "$1"); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == k3eval ]] && kill -STOP "$pid"
  done
  return 0
}

mh_leftovers() {
  local host pid
  for host in "${MH_HOSTS[@]}"; do
    for pid in $(mh_pids "$host"); do echo "$host: $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"; done
  done
  [[ -z $MH_HOSTFILE ]] || pgrep -af -- "$MH_HOSTFILE" || true
}

mh_ranks_alive() {
  local host pid
  for host in "${MH_HOSTS[@]}"; do
    for pid in $(mh_pids "$host"); do
      [[ $(cat "/proc/$pid/comm" 2>/dev/null) == k3eval ]] && echo "$host: k3eval pid $pid"
    done
  done
  return 0
}

# Removes the namespaces and the bridge of slot $1 and every process in those namespaces.
mh_down_names() {
  local slot=$1 ns pids port tries
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^k3h${slot}n[0-9]+$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    # A namespace outlives its name while a process is in it: wait for the killed ones to go.
    for ((tries = 0; tries < 50; tries++)); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  for port in $(ip -o link show 2>/dev/null | sed -nE "s/^[0-9]+: (k3v${slot}n[0-9]+)@.*/\1/p"); do
    ip link del "$port" 2>/dev/null || true
  done
  ip link del "k3br$slot" 2>/dev/null || true
}

mh_down() {
  [[ -n $MH_SLOT ]] || return 0
  if [[ -n $MH_SLURM_DIR ]]; then
    "$mh_dir/../slurm/cluster.sh" kill "$MH_SLURM_DIR" || true
    MH_SLURM_DIR=""
  fi
  # mpirun runs outside the namespaces; it names this fixture's hostfile on its command line.
  [[ -z $MH_HOSTFILE ]] || pkill -KILL -f -- "$MH_HOSTFILE" 2>/dev/null || true
  mh_down_names "$MH_SLOT"
  [[ -z $MH_STATE ]] || rm -rf "$MH_STATE"
  # In braces: a bare exec would make the 2>/dev/null the shell's own stderr from here on.
  { exec {MH_LOCK_FD}>&-; } 2>/dev/null || true
  MH_SLOT=""
  MH_HOSTS=()
}
