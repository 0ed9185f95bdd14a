# SIGTERM (or SIGUSR1) to ONE rank: every rank stops at the same step, a
# checkpoint is written, the job exits 75; resuming continues to the same
# weights as an uninterrupted run.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 400 --val-n 40 --shape 8 --classes 3 --dtype float32 --seed 6
common=(--data "$WORK/d.h5" --model dense:64,relu,dense:64,relu,dense:3 --batch-size 8 --seed 1
        --device cpu --threads 1 --log-every 50 --val-set "")

preempt() {  # preempt NP SIGNAL RANK
  local np=$1 sig=$2 victim=$3 dir=$WORK/ck-$1-$2
  local marker="$WORK/m-$np-$sig.jsonl"
  set +e
  timeout -k 5 120 "$MPIEXEC" -n "$np" --oversubscribe "$DPTRAIN" train "${common[@]}" --steps 100000 \
    --checkpoint-dir "$dir" --metrics "$marker" </dev/null >"$WORK/p.out" 2>"$WORK/p.err" &
  local job=$!
  set -e
  local pid="" i
  for i in $(seq 1 100); do
    # Signal once training is under way (a train event has been written).
    if [[ -s $marker ]] && pid=$(rank_pid "$marker" "$victim"); then break; fi
    sleep 0.2
  done
  [[ -n $pid ]] || fail "rank $victim never started"
  kill -s "$sig" "$pid"
  set +e
  wait $job
  local rc=$?
  set -e
  [[ $rc -eq 75 ]] || { cat "$WORK/p.err"; fail "$np ranks, $sig to rank $victim: exit $rc, expected 75"; }
  ls "$dir"/ckpt-*.h5 >/dev/null 2>&1 || fail "no checkpoint after $sig"
  grep -q "stopped by a signal" "$WORK/p.err" || fail "no stop message"
}
preempt 2 TERM 1
preempt 3 USR1 2

# A signal that comes before MPI starts (Slurm may send one at any moment of
# start-up) is kept: the run stops after its first step, with a checkpoint.
DPTRAIN_TEST_SIGNAL_AT_START=1 run 2 120 train "${common[@]}" --steps 1000 --checkpoint-dir "$WORK/ck-early"
expect_rc 75 "USR1 before MPI_Init"
grep -q "stopped by a signal after step 1 with a checkpoint" "$ERR" || { cat "$ERR"; fail "no stop after step 1"; }
[[ -f $WORK/ck-early/ckpt-000000001.h5 ]] || fail "no checkpoint of step 1 after an early signal"

# Resume the 2-rank run from its checkpoint to a fixed step; it must equal
# a straight run to that step.
dir=$WORK/ck-2-TERM
ck=$(ls "$dir"/ckpt-*.h5 | tail -1)
stopped=$(basename "$ck" .h5 | sed 's/ckpt-0*//')
target=$((stopped + 30))
run 2 120 train "${common[@]}" --steps $target --checkpoint-dir "$dir" --save "$WORK/resumed.h5"
expect_rc 0 "resume after preemption"
run 2 120 train "${common[@]}" --steps $target --save "$WORK/straight.h5"
expect_rc 0 "straight run"
compare_models "$WORK/resumed.h5" "$WORK/straight.h5" exact || fail "resumed run differs"
echo "PASS (stopped at step $stopped)"
