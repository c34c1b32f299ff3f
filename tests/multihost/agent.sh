#!/usr/bin/env bash
# Open MPI's rsh launch agent for the hosts of tests/multihost/fixture.sh. ORTE calls it like
# ssh: `agent.sh [ssh options] HOST COMMAND`, COMMAND one shell string that starts orted. The
# agent enters HOST's network namespace with a UTS namespace of its own named HOST, so that the
# daemon and its ranks see that host name, and runs COMMAND there with a shell.
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -o | -p | -l | -i | -F | -E | -b | -c | -e | -J | -L | -R | -D | -W | -w) shift 2 ;;
    *) shift ;;
  esac
done
[[ $# -ge 2 ]] || { echo "agent.sh: usage: agent.sh [ssh options] HOST COMMAND" >&2; exit 255; }
host=$1
shift
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && eval "$*"' "$host" "$@"
