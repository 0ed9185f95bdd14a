#!/bin/bash
# Tests: jobs/slurm_job.sh's requeue after exit 75, without Slurm, against a
# stand-in scontrol. A successful `scontrol requeue` ends the batch step at
# once: Slurm sends SIGTERM to the whole step, scontrol included, and can do
# so before scontrol has reported. The job script must still say that the
# job was requeued (test_slurm.sh greps that line, and so do users), and it
# must still report a requeue that really failed, with Slurm's message.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-requeue.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

# The stand-in: `show job` prints the job's Requeue flag and restart count
# (from files), `requeue` acts as the mode says.
mkdir -p "$work/bin"
cat >"$work/bin/scontrol" <<'SCONTROL'
#!/bin/bash
state=$FAKE_SLURM_STATE
case "$1" in
  show) echo "JobId=$3 JobState=RUNNING Requeue=$(cat "$state/requeue") Restarts=$(cat "$state/restarts")" ;;
  requeue)
    case $(cat "$state/mode") in
      term-first)  # Slurm's SIGTERM to the step arrives before scontrol's answer
        echo 1 >"$state/restarts"
        kill -TERM 0
        sleep 0.2
        exit 0 ;;
      refused)
        echo "Requested operation is presently disabled for job $2" >&2
        exit 1 ;;
    esac ;;
esac
SCONTROL
chmod +x "$work/bin/scontrol"

# run_requeue MODE REQUEUE_FLAG: calls dptrain_requeue as the job script does
# after srun (its TERM trap still set), in a process group of its own.
run_requeue() {
  local state=$work/state
  mkdir -p "$state"
  echo "$1" >"$state/mode"
  echo "$2" >"$state/requeue"
  echo 0 >"$state/restarts"
  FAKE_SLURM_STATE=$state PATH="$work/bin:$PATH" SLURM_JOB_ID=42 ROOT=$root \
    setsid --wait bash -c '
      signal_seen=""; trap "signal_seen=TERM" TERM
      source "$ROOT/jobs/slurm_job.sh"
      run_dir=/runs/r42 dptrain_script=/jobs/x.sbatch
      dptrain_requeue' >"$work/out" 2>&1
}

# expect NAME TEXT: the last run printed TEXT.
expect() {
  if grep -qF -- "$2" "$work/out"; then
    echo "ok: $1"
  else
    echo "FAIL: $1: no '$2' in:" >&2
    sed 's/^/  | /' "$work/out" >&2
    failures=$((failures + 1))
  fi
}

# expect_not NAME TEXT: the last run did not print TEXT.
expect_not() {
  if grep -qF -- "$2" "$work/out"; then
    echo "FAIL: $1: '$2' in:" >&2
    sed 's/^/  | /' "$work/out" >&2
    failures=$((failures + 1))
  else
    echo "ok: $1"
  fi
}

run_requeue term-first 1
expect "SIGTERM before scontrol answers: reported as requeued" "requeued job 42, it resumes from /runs/r42/ckpt"
expect_not "SIGTERM before scontrol answers: no failure reported" "requeue failed"

run_requeue refused 1
expect "a refused requeue: reported with Slurm's message" \
  "scontrol requeue failed: Requested operation is presently disabled for job 42"
expect "a refused requeue: the resume command" "sbatch --export=ALL,DPTRAIN_RUN_DIR=/runs/r42 /jobs/x.sbatch"
expect_not "a refused requeue: not reported as requeued" "requeued job 42"

run_requeue refused 0
expect "--no-requeue: said so, with the resume command" "not requeued (the job was submitted with --no-requeue); resume by hand"

((failures == 0)) || { echo "$failures check(s) failed" >&2; exit 1; }
