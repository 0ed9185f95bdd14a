#!/usr/bin/env bash
# Implements: an mpirun job across simulated nodes on one machine, to
# rehearse and test multi-node runs without a cluster. Each node is a Linux
# UTS namespace with its own hostname (simnode1, simnode2, ...), started by
# Open MPI's launch agent (tools/simnodes-agent.sh stands in for ssh), so
# mpirun, MPI_Comm_split_type(SHARED) and Slurm-less scripts all see
# separate nodes. Ranks of one node talk over shared memory, ranks of
# different nodes over TCP on the loopback interface only.
#
#   tools/simnodes.sh [--nodes N] [--per-node M] [--private-net] [MPIRUN OPTIONS] -- PROGRAM ARGS...
#   tools/simnodes.sh --check        # exit 0 if simulated nodes work here, 77 if not
#   tools/simnodes.sh --pids NODE    # pids of the processes "on" NODE (needs SIMNODES_STATE)
#
# --private-net runs the job in a new network namespace holding only a
# loopback interface: no packet can leave the machine (needs iproute2).
# Needs root (or CAP_SYS_ADMIN) for the namespaces and Open MPI 4.x.
# Environment: MPIEXEC (default mpirun); SIMNODES_STATE, a folder where the
# agent writes NODE.uts (the namespace id of each node, see
# simnodes_pids.sh); OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) as usual for root.
# Exit: the job's exit code, 2 for bad usage, 77 when simulated nodes
# cannot be made here (the message says why).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MPIEXEC=${MPIEXEC:-mpirun}
nodes=2 per_node=2 private_net=0 check_only=0 pids_of=
mpirun_opts=()

usage() {
  sed -n '10,12p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2
  exit 2
}

while (($#)); do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --per-node) per_node=$2; shift 2 ;;
    --private-net) private_net=1; shift ;;
    --check) check_only=1; shift ;;
    --pids) pids_of=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) mpirun_opts+=("$1"); shift ;;
  esac
done
[[ $nodes =~ ^[1-9][0-9]*$ && $per_node =~ ^[1-9][0-9]*$ ]] || { echo "simnodes: --nodes and --per-node take positive integers" >&2; exit 2; }

# Every process whose UTS namespace is NODE's (the agent wrote its id).
node_pids() {
  local file=${SIMNODES_STATE:?--pids needs SIMNODES_STATE}/$1.uts ns p
  [[ -s $file ]] || { echo "simnodes: no node $1 in $SIMNODES_STATE (not started yet?)" >&2; exit 1; }
  ns=$(<"$file")
  [[ -n $ns && $ns != "$(readlink /proc/self/ns/uts)" ]] || { echo "simnodes: $file names no node namespace" >&2; exit 1; }
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/uts" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
  return 0
}
if [[ -n $pids_of ]]; then node_pids "$pids_of"; exit 0; fi

cannot() {
  echo "simnodes: cannot simulate nodes here: $*" >&2
  exit 77
}

# What the job needs, tried before anything starts.
probe() {
  local err
  command -v unshare >/dev/null || cannot "unshare (util-linux) is not installed"
  err=$(unshare --uts -- sh -c 'hostname simnodes-probe' 2>&1) ||
    cannot "unshare --uts is not permitted (${err:-no message}); run as root or with CAP_SYS_ADMIN"
  "$MPIEXEC" --version 2>/dev/null | grep -qE "Open MPI|OpenRTE" ||
    cannot "$MPIEXEC is not Open MPI (the launch agent is Open MPI's plm_rsh_agent)"
  if ((private_net)); then
    command -v ip >/dev/null || cannot "--private-net needs ip (iproute2)"
    err=$(unshare --net -- sh -c 'ip link set lo up' 2>&1) ||
      cannot "unshare --net is not permitted (${err:-no message})"
  fi
}
probe
((check_only)) && exit 0
(($#)) || usage

tmp=$(mktemp -d "${TMPDIR:-/tmp}/simnodes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for ((i = 1; i <= nodes; i++)); do echo "simnode$i slots=$per_node"; done >"$tmp/hostfile"

cmd=("$MPIEXEC" --hostfile "$tmp/hostfile" -n $((nodes * per_node)) --map-by "ppr:$per_node:node"
     # The agent starts one daemon per node; no daemon starts others.
     -mca plm_rsh_agent "$here/simnodes-agent.sh" -mca plm_rsh_no_tree_spawn 1
     # The node names are not looked up (no DNS query leaves the machine).
     -mca if_base_do_not_resolve 1
     # Loopback only: daemons to mpirun, and rank to rank between nodes.
     -mca oob_tcp_if_include lo -mca btl_tcp_if_include lo -mca btl self,vader,tcp
     "${mpirun_opts[@]}" "$@")
# The job's exit code passes through (unshare execs the command).
set +e
if ((private_net)); then
  unshare --net -- sh -c 'ip link set lo up && exec "$@"' simnodes "${cmd[@]}"
else
  "${cmd[@]}"
fi
exit $?
