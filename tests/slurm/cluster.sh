# Implements: a private one-machine Slurm cluster for the job-script test
# (sourced by test_slurm.sh): munged, slurmctld and slurmd with their own
# key, config, state, spool, logs and loopback ports in a scratch folder,
# stopped by the PIDs they wrote. Nothing of the machine's own Slurm or
# munge (/etc/slurm, /etc/munge, /run/munge) is used or changed.

# Exit code that ctest counts as "skipped" (SKIP_RETURN_CODE).
SLURM_SKIP=77

skip() {
  echo "SKIP: $*"
  exit "$SLURM_SKIP"
}

# Skips unless this machine can run the daemons.
slurm_check_prerequisites() {
  local tool
  for tool in munged mungekey slurmctld slurmd sbatch srun scontrol squeue scancel; do
    command -v "$tool" >/dev/null ||
      skip "$tool not found (tools/install-deps.sh installs slurm-wlm and munge)"
  done
  [[ $(id -u) -eq 0 ]] || skip "slurmd must run as root to start jobs"
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# slurm_write_conf DIR: slurm.conf for one node (this machine's name, all
# its CPUs) reached on 127.0.0.1. No cgroups: processes are tracked by
# parentage and bound to CPUs with sched_setaffinity, which also works
# unprivileged in a container.
slurm_write_conf() {
  local dir=$1 node cpus
  node=$(hostname -s)
  cpus=$(nproc --all)
  cat >"$dir/slurm.conf" <<EOF
ClusterName=dptraintest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=30
MinJobAge=3600
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  echo "PMIxCliTmpDirBase=$dir/tmp" >"$dir/mpi.conf"
}

# slurm_start DIR: starts the three daemons; sets SLURM_CONF and
# SLURM_DAEMON_PIDS. Skips when the node does not come up.
slurm_start() {
  SLURM_DIR=$1
  mkdir -p "$SLURM_DIR"/{munge,state,spool,log,tmp}
  chmod 700 "$SLURM_DIR/munge"
  mungekey --create --keyfile="$SLURM_DIR/munge/munge.key" >/dev/null
  slurm_write_conf "$SLURM_DIR"
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  SLURM_DAEMON_PIDS=()
  munged --force --key-file="$SLURM_DIR/munge/munge.key" --socket="$SLURM_DIR/munge/socket" \
    --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge/seed" || skip "munged does not start: $(tail -3 "$SLURM_DIR/log/munged.log")"
  slurm_remember_pid "$SLURM_DIR/munge/munged.pid"
  slurmctld -i || skip "slurmctld does not start: $(tail -3 "$SLURM_DIR/log/slurmctld.log")"
  slurm_remember_pid "$SLURM_DIR/slurmctld.pid"
  slurmd -N "$(hostname -s)" || skip "slurmd does not start: $(tail -3 "$SLURM_DIR/log/slurmd.log")"
  slurm_remember_pid "$SLURM_DIR/slurmd.pid"
  local i
  for i in $(seq 1 60); do
    if [[ $(sinfo -h -o %T 2>/dev/null) == idle ]]; then return 0; fi
    sleep 0.5
  done
  echo "--- slurmctld.log" && tail -5 "$SLURM_DIR/log/slurmctld.log"
  echo "--- slurmd.log" && tail -5 "$SLURM_DIR/log/slurmd.log"
  skip "the Slurm node did not become idle within 30 s"
}

# A daemon writes its PID file after it forks: wait for it.
slurm_remember_pid() {
  local file=$1 i
  for i in $(seq 1 50); do
    if [[ -s $file ]]; then
      SLURM_DAEMON_PIDS+=("$(<"$file")")
      return 0
    fi
    sleep 0.1
  done
  skip "no PID file $file"
}

# Stops the daemons this test started, newest first, by PID: TERM, then
# KILL after 10 s. Safe to call twice (the EXIT trap calls it).
slurm_stop() {
  local i pid n
  for ((i = ${#SLURM_DAEMON_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_DAEMON_PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for n in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  SLURM_DAEMON_PIDS=()
}

# Every process started under this cluster (they inherit its SLURM_CONF),
# as "PID command line", other than this test's own shells and, while they
# run, the daemons and slurmctld's helper slurmscriptd.
slurm_leftovers() {
  local env pid ppid cmd
  for env in $(grep -lsxzF "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ); do
    pid=${env#/proc/}
    pid=${pid%/environ}
    [[ " ${SLURM_DAEMON_PIDS[*]} " == *" $pid "* ]] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
    [[ $cmd == *test_slurm.sh* || $cmd == grep* ]] && continue
    ppid=$(awk '{print $4}' 2>/dev/null <"/proc/$pid/stat") || continue
    [[ $cmd == *slurmscriptd* && " ${SLURM_DAEMON_PIDS[*]} " == *" $ppid "* ]] && continue
    echo "$pid $cmd"
  done
}
