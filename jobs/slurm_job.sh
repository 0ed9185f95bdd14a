# Implements: the common part of dptrain's Slurm batch scripts
# (jobs/*.sbatch source it after their #SBATCH lines): the job's run folder,
# srun with one rank per task, Slurm's signals forwarded to the ranks, and a
# requeue after dptrain checkpointed and exited 75 (docs/design.md section 6).
#
# Environment (set with `sbatch --export=ALL,NAME=VALUE`):
#   DPTRAIN_RUN_DIR   the run folder: outputs, metrics, checkpoints (default
#                     $DPTRAIN_RUNS/<job name>-<job id>); name an old one to
#                     resume a finished or failed run by hand
#   DPTRAIN_RUNS      where run folders go (default <submit dir>/runs)
#   DPTRAIN_BIN       the dptrain binary (default <checkout>/build/dptrain)
#   DPTRAIN_SRUN_MPI  srun's --mpi plugin (default pmix: Open MPI needs PMIx)
#
# The sourcing script has set `signal_seen` traps for USR1 and TERM before
# anything else, so a signal during start-up is remembered, not fatal.

# True when an argument of dptrain's command line sets option $1.
dptrain_has_option() {
  local name=$1 a
  shift
  for a in "$@"; do [[ $a == "$name" || $a == "$name="* ]] && return 0; done
  return 1
}

# The trap: remembers the signal and passes it to srun, which passes it to
# every rank (dptrain agrees on a step, checkpoints there and exits 75).
dptrain_forward() {
  signal_seen=$1
  pending=$1
  trapped=1
  dptrain_pass_pending
}

# Only once dptrain has created the ready file do all ranks catch the
# signals: before, one would kill a rank still loading, or srun itself.
dptrain_pass_pending() {
  if [[ -n $pending && -n ${srun_pid:-} && -e $ready_file ]]; then
    kill -s "$pending" "$srun_pid" 2>/dev/null || true
    pending=""
  fi
}

# Waits for srun and sets rc to srun's own exit status. A trapped signal
# makes `wait` return 128+signal while srun still runs: wait again. When
# srun ended just as the signal came, the first wait may already have
# returned its status and a second one fails with 127: keep the first.
dptrain_wait_srun() {
  local r r2
  while :; do
    dptrain_pass_pending
    if [[ -n $pending ]] && kill -0 "$srun_pid" 2>/dev/null; then
      sleep 0.2  # a signal waits for the ranks' handlers
      continue
    fi
    trapped=0
    wait "$srun_pid"
    r=$?
    if ((!trapped)); then rc=$r; return; fi
    if kill -0 "$srun_pid" 2>/dev/null; then continue; fi
    wait "$srun_pid" 2>/dev/null
    r2=$?
    if ((r2 == 127)); then rc=$r; else rc=$r2; fi
    return
  done
}

# True when Slurm counts more restarts of this job than it had at this start.
dptrain_was_requeued() {
  local restarts
  restarts=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Restarts=//p')
  [[ -n $restarts ]] && ((restarts > ${SLURM_RESTART_COUNT:-0}))
}

# After exit 75 on USR1 (the time limit nears, or `scancel --signal=USR1`):
# requeue; the job starts again under the same id and resumes.
dptrain_requeue() {
  local how="resume by hand: sbatch --export=ALL,DPTRAIN_RUN_DIR=$run_dir $dptrain_script"
  if scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -q "Requeue=0"; then
    echo "dptrain-job: checkpoint written; not requeued (the job was submitted with --no-requeue); $how"
    return
  fi
  # The requeue ends this batch step: Slurm sends SIGTERM to all of it,
  # often before scontrol has reported its success. With TERM ignored,
  # scontrol (which inherits that) finishes and reports; and a failure it
  # reports is checked against the job's restart count.
  trap '' TERM
  local msg
  if msg=$(scontrol requeue "$SLURM_JOB_ID" 2>&1) || dptrain_was_requeued; then
    echo "dptrain-job: checkpoint written; requeued job $SLURM_JOB_ID, it resumes from $run_dir/ckpt"
  else
    echo "dptrain-job: checkpoint written; scontrol requeue failed: $msg; $how" >&2
  fi
}

# dptrain_job SCRIPT [--option value]... -- [dptrain train options...]: runs
# the job to its end. SCRIPT is the batch script as submitted (for the
# resume hint); each --option value pair before "--" is a default, given
# unless the user's options (after "--") set that option.
dptrain_job() {
  dptrain_script=$1
  shift
  local defaults=()
  while (($# > 0)) && [[ $1 != -- ]]; do defaults+=("$1"); shift; done
  shift
  local bin=${DPTRAIN_BIN:-$dptrain_root/build/dptrain}
  if [[ ! -x $bin ]]; then
    echo "dptrain-job: error: no dptrain binary at $bin (build the checkout, or set DPTRAIN_BIN)" >&2
    exit 1
  fi
  run_dir=${DPTRAIN_RUN_DIR:-${DPTRAIN_RUNS:-$SLURM_SUBMIT_DIR/runs}/$SLURM_JOB_NAME-$SLURM_JOB_ID}
  mkdir -p "$run_dir/ckpt" || exit 1
  run_dir=$(cd "$run_dir" && pwd)
  local args=("$@") i
  for ((i = 0; i + 1 < ${#defaults[@]}; i += 2)); do
    dptrain_has_option "${defaults[i]}" "${args[@]}" || args+=("${defaults[i]}" "${defaults[i + 1]}")
  done
  dptrain_has_option --checkpoint-dir "${args[@]}" || args+=(--checkpoint-dir "$run_dir/ckpt")
  dptrain_has_option --checkpoint-every "${args[@]}" || args+=(--checkpoint-every 500)
  dptrain_has_option --metrics "${args[@]}" || args+=(--metrics "$run_dir/metrics.jsonl")
  dptrain_has_option --resume "${args[@]}" || args+=(--resume auto)
  echo "dptrain-job: job $SLURM_JOB_ID (start $((${SLURM_RESTART_COUNT:-0} + 1))) on" \
    "${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-1} rank(s); run folder $run_dir"
  if [[ $signal_seen == TERM ]]; then
    echo "dptrain-job: SIGTERM before the ranks started; exit 143" >&2
    exit 143
  fi

  ready_file=$run_dir/.ranks-ready
  rm -f "$ready_file"
  export DPTRAIN_READY_FILE=$ready_file
  pending=""
  if [[ $signal_seen == USR1 ]]; then pending=USR1; fi  # came before srun: pass it on
  trap 'dptrain_forward USR1' USR1
  trap 'dptrain_forward TERM' TERM
  # srun of Slurm 22.05 to 23.02 does not read the job's --cpus-per-task:
  # give it explicitly, or bound ranks may share one core.
  srun --mpi="${DPTRAIN_SRUN_MPI:-pmix}" --kill-on-bad-exit=1 \
    --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    "$bin" train "${args[@]}" &
  srun_pid=$!
  dptrain_wait_srun

  # 75 without a TERM: USR1 to the batch script, or to the ranks directly
  # (--signal=USR1@T without B:, scancel --signal=USR1 without --batch).
  if [[ $rc -eq 75 && $signal_seen != TERM ]]; then
    dptrain_requeue
  elif [[ $rc -eq 75 ]]; then
    echo "dptrain-job: stopped by SIGTERM with a checkpoint in $run_dir/ckpt (scancel or" \
      "preemption; a preempted job is requeued by Slurm)"
  elif [[ $rc -eq 0 && ! -e $ready_file ]]; then
    # srun can exit 0 when the step failed to launch
    echo "dptrain-job: error: the ranks never started (srun exited 0); see srun's errors above" >&2
    rc=1
  elif [[ $rc -ne 0 ]]; then
    echo "dptrain-job: srun exited with $rc" >&2
  fi
  exit "$rc"
}
