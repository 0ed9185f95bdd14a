# Implements: helpers of test_slurm.sh (sourced): submit the CPU job
# script, follow a job through scontrol, and read its output, run folder
# and checkpoints. Expects SUBMIT, SCRIPT, WORK, PYTHON and a running
# cluster (SLURM_CONF).

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "${SLURM_DIR:-}"/log/slurmctld.log "${SLURM_DIR:-}"/log/slurmd.log; do
    [[ -f $f ]] || continue
    echo "--- tail of $f" >&2
    tail -15 "$f" >&2
  done
  exit 1
}

# Two ranks of one CPU each (one rank on a one-CPU machine).
RANKS=$(($(nproc) >= 2 ? 2 : 1))

# submit [--sbatch OPTION]... DPTRAIN_OPTIONS...: prints the job id.
submit() {
  local sbatch_opts=()
  while [[ ${1:-} == --sbatch ]]; do
    sbatch_opts+=("$2")
    shift 2
  done
  # Later sbatch options win: the test's own come after the defaults.
  sbatch --parsable --ntasks-per-node="$RANKS" --cpus-per-task=1 "${sbatch_opts[@]}" \
    "$SCRIPT" "$@" || fail "sbatch $SCRIPT $*"
}

job_out() { echo "$SUBMIT/dptrain-fmnist-cpu-$1.out"; }
run_dir() { echo "$SUBMIT/runs/dptrain-fmnist-cpu-$1"; }

# job_field JOB NAME: one field of `scontrol show job`.
job_field() {
  scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

show_job() {
  echo "--- job $1: $(scontrol show job -o "$1" | tr ' ' '\n' | grep -E '^(JobState|Reason|ExitCode|Restarts)=' | tr '\n' ' ')" >&2
  echo "--- output of job $1" >&2
  tail -25 "$(job_out "$1")" >&2 || true
  # A rank that died prints why before its backtrace (glibc's or a
  # sanitizer's message, the signal), which the tail may have cut off.
  echo "--- why a rank died, if one did (job $1)" >&2
  grep -n -E "free\(\)|corrupt|malloc|Signal:|Signal code|AddressSanitizer|terminate called|error:" \
    "$(job_out "$1")" 2>/dev/null | head -20 >&2 || true
}

# wait_ended JOB SECONDS: until the job is in a final state.
wait_ended() {
  local job=$1 limit=$2 t0=$SECONDS
  while ((SECONDS - t0 < limit)); do
    case $(job_field "$job" JobState) in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) return 0 ;;
    esac
    sleep 0.5
  done
  show_job "$job"
  fail "job $job did not end within ${limit}s"
}

# expect_state JOB STATE EXIT_CODE
expect_state() {
  local state code
  state=$(job_field "$1" JobState)
  code=$(job_field "$1" ExitCode)
  if [[ $state != "$2" || $code != "$3:0" ]]; then
    show_job "$1"
    fail "job $1: $state with exit code $code, expected $2 with $3:0"
  fi
}

# expect_completed JOB RESTARTS
expect_completed() {
  expect_state "$1" COMPLETED 0
  [[ $(job_field "$1" Restarts) -eq $2 ]] || { show_job "$1"; fail "job $1: expected $2 restart(s)"; }
  grep -q "^done: " "$(job_out "$1")" || { show_job "$1"; fail "job $1: no done line"; }
}

# After USR1: a checkpoint, exit 75 and a requeue (the job pends again).
expect_requeued() {
  local job=$1 t0=$SECONDS out
  out=$(job_out "$job")
  while ((SECONDS - t0 < 120)); do
    if [[ $(job_field "$job" JobState) == PENDING && $(job_field "$job" Restarts) -ge 1 ]]; then break; fi
    sleep 0.5
  done
  [[ $(job_field "$job" JobState) == PENDING ]] || { show_job "$job"; fail "job $job was not requeued"; }
  grep -q "dptrain: stopped by a signal after step .* with a checkpoint; exit 75" "$out" ||
    { show_job "$job"; fail "job $job: no stop line"; }
  grep -q "srun: error: .*Exited with exit code 75" "$out" || { show_job "$job"; fail "job $job: ranks did not exit 75"; }
  # The job pends as soon as Slurm has requeued it, maybe before the batch
  # script has written that it did.
  wait_line "$out" "requeued job $job" 30
}

stopped_step() {
  local step
  step=$(grep -o "stopped by a signal after step [0-9]*" "$(job_out "$1")" | tail -1 | grep -o "[0-9]*$" || true)
  [[ -n $step && $step -lt $STEPS ]] || fail "job $1: no stop before the last step"
  echo "$step"
}

# A requeued job may start again only after about 2 minutes: start it now,
# then it must resume and complete.
release_and_finish() {
  local job=$1 t0=$SECONDS
  # Not before the first start's steps are gone: a new step 0 would find
  # the old one's PMIx socket still there (a real cluster waits 2 minutes).
  while pgrep -f "slurmstepd: \[$job\." >/dev/null; do
    ((SECONDS - t0 < 60)) || fail "job $job: the first start's slurmstepd did not end"
    sleep 0.2
  done
  # slurmd refuses a start whose credential is not newer, in whole
  # seconds, than the one the requeue revoked ("Job credential revoked").
  sleep 2
  scontrol update JobId="$job" StartTime=now || fail "scontrol update JobId=$job StartTime=now"
  wait_ended "$job" "$2"
  expect_completed "$job" 1
  grep -q "dptrain-job: job $job (start 2)" "$(job_out "$job")" || fail "job $job: no second start"
  grep -q "dptrain: resuming from .*ckpt" "$(job_out "$job")" || { show_job "$job"; fail "job $job did not resume"; }
}

# wait_line FILE TEXT SECONDS: until FILE has a line containing TEXT.
wait_line() {
  local t0=$SECONDS
  while ((SECONDS - t0 < $3)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no '$2' in $1 within $3 s"
}

# wait_train_step JOB STEP SECONDS: until a progress line at or past STEP.
wait_train_step() {
  local t0=$SECONDS last
  while ((SECONDS - t0 < $3)); do
    last=$(grep -Eo "^step [0-9]+/" "$(job_out "$1")" 2>/dev/null | tail -1 | tr -dc 0-9 || true)
    [[ -n $last && $last -ge $2 ]] && return 0
    sleep 0.1
  done
  show_job "$1"
  fail "job $1 did not reach step $2 within $3 s"
}

newest_checkpoint() {
  local ck
  ck=$(ls "$(run_dir "$1")"/ckpt/ckpt-*.h5 2>/dev/null | tail -1)
  [[ -n $ck ]] || fail "job $1: no checkpoint in $(run_dir "$1")/ckpt"
  echo "$ck"
}

checkpoint_step() {
  "$PYTHON" -c 'import sys, h5py; print(int(h5py.File(sys.argv[1], "r").attrs["step"]))' "$1"
}

# compare_models A B: /model of the two checkpoints bitwise equal.
compare_models() {
  "$PYTHON" - "$1" "$2" <<'PY' || fail "weights of $2 differ from $1"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    def tensors(f):
        out = {}
        f["model"].visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return out
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
    for n in ta:
        if not np.array_equal(ta[n], tb[n]):
            sys.exit(f"{n}: max abs difference {np.abs(ta[n] - tb[n]).max()}")
PY
}
