# Implements: jobs/fashion_mnist_cpu.sbatch against a real Slurm started
# for this one machine (cluster.sh): the default --threads under `srun -c1`
# and `sbatch -c2`; a normal run; USR1 to the batch step while the ranks
# start and mid-run (repeated while the job stops), each a checkpoint, exit
# 75, a requeue and a resume to the normal run's weights, bitwise;
# --no-requeue; scancel, which leaves a valid checkpoint and the ranks' last
# lines; nothing left running. Exit 77 (skipped) where Slurm cannot run.
set -euo pipefail

: "${DPTRAIN:?run through ctest}"
: "${DPTRAIN_SOURCE_DIR:?run through ctest}"
PYTHON=$("$DPTRAIN_SOURCE_DIR/tools/find-python.sh")
source "$(dirname "$0")/cluster.sh"
source "$(dirname "$0")/jobs.sh"
slurm_check_prerequisites

# Only this cluster: nothing from an enclosing job or the machine's Slurm.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl_tcp_if_include=lo DPTRAIN_BIN=$DPTRAIN

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-slurm.XXXXXX")
# On failure the scratch folder stays, for its logs.
finish() {
  local rc=$?
  slurm_stop
  if [[ $rc -eq 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap finish EXIT
began=$SECONDS
slurm_start "$WORK/cluster"
srun --mpi=list 2>&1 | grep -q pmix || skip "Slurm has no PMIx plugin (srun --mpi=list); Open MPI needs it"
echo "cluster up in $((SECONDS - began)) s"

# Submitted from a folder with no runs/ in it, by a relative path.
SUBMIT=$WORK/submit
mkdir -p "$SUBMIT"
cd "$SUBMIT"
SCRIPT=$(realpath --relative-to="$SUBMIT" "$DPTRAIN_SOURCE_DIR/jobs/fashion_mnist_cpu.sbatch")
# 10 epochs of the committed 2,000-image sample: 160 steps.
STEPS=160
JOB_ARGS=(--data "$DPTRAIN_SOURCE_DIR/data/samples/fashion_mnist_2k.h5" --epochs 10
          --log-every 5 --checkpoint-every 40 --seed 3)

# --- the default --threads follows the CPUs srun gives a rank (issue 11) ---
srun -n1 -c1 "$DPTRAIN" train --data "${JOB_ARGS[1]}" --steps 1 --val-set "" >"$WORK/threads.out" 2>&1 ||
  { cat "$WORK/threads.out"; fail "srun -n1 -c1 dptrain"; }
grep -q "1 thread(s)/rank" "$WORK/threads.out" ||
  { grep "thread" "$WORK/threads.out"; fail "srun -n1 -c1: expected 1 thread(s)/rank"; }
echo "ok: srun -n1 -c1 gives 1 thread/rank"

# --- srun gets the job's --cpus-per-task (Slurm 22.05 no longer passes it
# on): one rank of 2 CPUs has 2 threads ---
if (($(nproc) >= 2)); then
  wide=$(submit --sbatch --ntasks-per-node=1 --sbatch --cpus-per-task=2 \
    --data "${JOB_ARGS[1]}" --steps 2 --val-set "")
  wait_ended "$wide" 120
  expect_completed "$wide" 0
  grep -q "1 rank(s) on 1 node(s), 1 per node, device cpu, 2 thread(s)/rank" "$(job_out "$wide")" ||
    { show_job "$wide"; fail "--cpus-per-task=2: expected 2 thread(s)/rank"; }
  echo "ok: --cpus-per-task=2 reaches srun: 2 threads/rank"
fi

# --- a normal run ---
normal=$(submit "${JOB_ARGS[@]}")
wait_ended "$normal" 300
expect_completed "$normal" 0
[[ -d $SUBMIT/runs/dptrain-fmnist-cpu-$normal/ckpt ]] || fail "no run folder runs/dptrain-fmnist-cpu-$normal"
reference=$(newest_checkpoint "$normal")
[[ $(checkpoint_step "$reference") -eq $STEPS ]] || fail "normal run ended at $(checkpoint_step "$reference")"
echo "ok: normal run completed ($STEPS steps)"

# --- USR1 at start-up: while the ranks load (slowly, as from a busy shared
# file system: a wrapper sleeps 2 s first, and dies of a signal meanwhile) ---
printf '#!/bin/bash\nsleep 2\nexec "%s" "$@"\n' "$DPTRAIN" >"$WORK/slow-dptrain"
chmod +x "$WORK/slow-dptrain"
early=$(DPTRAIN_BIN=$WORK/slow-dptrain submit "${JOB_ARGS[@]}")
wait_line "$(job_out "$early")" "dptrain-job: job $early " 60
scancel --signal=USR1 --batch "$early"
expect_requeued "$early"
# A new submission starts afresh in its own run folder.
grep -q "dptrain: resuming from" "$(job_out "$early")" && fail "a new submission resumed an old run"
step=$(stopped_step "$early")
release_and_finish "$early" 300
compare_models "$reference" "$(newest_checkpoint "$early")"
echo "ok: USR1 at start-up: stopped after step $step, requeued, resumed, same weights"

# --- USR1 mid-run, then more every 0.1 s while the job stops: they come
# during the checkpoint, srun's exit and the requeue ---
mid=$(submit "${JOB_ARGS[@]}")
wait_train_step "$mid" 20 120
scancel --signal=USR1 --batch "$mid"
signals=1
while [[ $(job_field "$mid" JobState) == RUNNING ]]; do
  sleep 0.1
  if scancel --signal=USR1 --batch "$mid" 2>/dev/null; then signals=$((signals + 1)); fi
done
expect_requeued "$mid"
step=$(stopped_step "$mid")
release_and_finish "$mid" 300
compare_models "$reference" "$(newest_checkpoint "$mid")"
echo "ok: $signals USR1s mid-run: stopped after step $step, requeued, resumed, same weights"

# --- --no-requeue: checkpoint and exit 75, said plainly, no requeue ---
norq=$(submit --sbatch --no-requeue "${JOB_ARGS[@]}")
wait_train_step "$norq" 10 120
scancel --signal=USR1 --batch "$norq"
wait_ended "$norq" 120
expect_state "$norq" FAILED 75
grep -q "not requeued (the job was submitted with --no-requeue)" "$(job_out "$norq")" ||
  { cat "$(job_out "$norq")"; fail "--no-requeue: no explanation"; }
echo "ok: --no-requeue: exit 75 after a checkpoint, not requeued"

# --- scancel: the ranks checkpoint within KillWait and their lines remain ---
cancel=$(submit "${JOB_ARGS[@]}")
wait_train_step "$cancel" 20 120
t0=$SECONDS
scancel "$cancel"
wait_ended "$cancel" 60
took=$((SECONDS - t0))
expect_state "$cancel" CANCELLED 75
out=$(job_out "$cancel")
grep -q "dptrain: stopped by a signal after step .* with a checkpoint" "$out" || { cat "$out"; fail "scancel: no stop line"; }
ck=$(newest_checkpoint "$cancel")
"$DPTRAIN" inspect "$ck" >/dev/null || fail "scancel: $ck is not a valid checkpoint"
[[ $(checkpoint_step "$ck") -eq $(stopped_step "$cancel") ]] || fail "scancel: checkpoint is not of the stop step"
echo "ok: scancel: ended in ${took} s, checkpoint of step $(checkpoint_step "$ck") valid"

# --- nothing left running ---
left=""
for i in $(seq 1 50); do
  left=$(slurm_leftovers)
  [[ -z $left ]] && break
  sleep 0.2
done
[[ -z $left ]] || fail "processes left running: $left"
slurm_stop
for i in $(seq 1 50); do
  left=$(slurm_leftovers)
  [[ -z $left ]] && break
  sleep 0.2
done
[[ -z $left ]] || fail "left running after the daemons stopped: $left"
echo "ok: nothing left running, daemons stopped"
echo "PASS in $((SECONDS - began)) s"
