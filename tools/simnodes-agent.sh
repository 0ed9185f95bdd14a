#!/bin/sh
# Implements: Open MPI's remote launch agent for simulated nodes (used by
# tools/simnodes.sh through -mca plm_rsh_agent). Open MPI calls it as ssh:
#   simnodes-agent.sh HOST orted ARGS...
# and, like ssh, it runs the joined arguments through a shell "on HOST": here
# a new UTS namespace on this machine whose hostname is HOST. The network and
# the file system stay shared, so the daemons reach mpirun on loopback and
# start the ranks from the same paths.
#
# With SIMNODES_STATE set (a folder), it writes SIMNODES_STATE/HOST.uts: the
# namespace's id (as /proc/PID/ns/uts reads), so tests can find which
# processes run "on" HOST.
set -e
host=$1
shift
exec unshare --uts -- /bin/sh -c '
  hostname "$1"
  if [ -n "$SIMNODES_STATE" ]; then readlink /proc/self/ns/uts >"$SIMNODES_STATE/$1.uts"; fi
  shift
  eval "$*"' simnodes-agent "$host" "$@"
