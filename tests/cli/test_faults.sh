# Never hang: a rank killed with SIGKILL ends the job promptly and leaves the
# checkpoints intact; a rank stopped with SIGSTOP trips the watchdog (exit 6,
# naming the phase); a NaN stops every rank at the same step with exit 5;
# a perturbed tower is caught by the consistency check.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 400 --val-n 40 --shape 8 --classes 3 --dtype float32 --seed 6
common=(train --data "$WORK/d.h5" --model dense:64,relu,dense:3 --batch-size 8 --seed 1
        --device cpu --threads 1 --log-every 50 --val-set "")

start_job() {  # start_job NP MARKER ARGS... ; sets JOB
  local np=$1 marker=$2
  shift 2
  set +e
  timeout -k 5 120 "$MPIEXEC" -n "$np" --oversubscribe "$DPTRAIN" "${common[@]}" --metrics "$marker" "$@" \
    </dev/null >"$WORK/j.out" 2>"$WORK/j.err" &
  JOB=$!
  set -e
  local i
  for i in $(seq 1 100); do
    [[ -s $marker ]] && return 0
    sleep 0.2
  done
  fail "job never started training"
}
finish_job() {  # finish_job ; sets RC and ELAPSED
  local t0=$SECONDS
  set +e
  wait $JOB
  RC=$?
  set -e
  ELAPSED=$((SECONDS - t0))
}

# --- SIGKILL of rank 1 of 3 in the middle of training -------------------------
dir=$WORK/ck-kill
start_job 3 "$WORK/kill.jsonl" --steps 1000000 --checkpoint-dir "$dir" --checkpoint-every 40
sleep 1
kill -9 "$(rank_pid "$WORK/kill.jsonl" 1)"
finish_job
[[ $RC -ne 0 && $RC -ne 124 ]] || fail "SIGKILL of a rank: exit $RC"
((ELAPSED < 20)) || fail "ranks took ${ELAPSED}s to go after a peer died"
sleep 1
pgrep -f -- "$WORK/kill.jsonl" >/dev/null && fail "processes left behind after a peer died"
newest=$(ls "$dir"/ckpt-*.h5 | tail -1)
run 1 60 "${common[@]}" --steps 1 --resume "$newest" --save "$WORK/after-kill.h5"
[[ $RC -eq 0 ]] || { cat "$ERR"; fail "newest checkpoint unusable after SIGKILL"; }
ls "$dir" | grep -q '\.tmp$' && fail "a .tmp file is left under the checkpoint dir"

# --- SIGSTOP of rank 1: the others' watchdog aborts with exit 6 ---------------
start_job 2 "$WORK/stop.jsonl" --steps 1000000 --comm-timeout 3
pid=$(rank_pid "$WORK/stop.jsonl" 1)
kill -STOP "$pid"
finish_job
kill -CONT "$pid" 2>/dev/null || true
[[ $RC -eq 6 ]] || { cat "$WORK/j.err"; fail "SIGSTOP: exit $RC, expected 6"; }
((ELAPSED < 3 + 12)) || fail "watchdog took ${ELAPSED}s with --comm-timeout 3"
grep -q "rank 0\] no progress for .* in .* at step" "$WORK/j.err" || { cat "$WORK/j.err"; fail "watchdog message"; }

# --- NaN injected into rank 1's shard at step 7: exit 5, named step -----------
for np in 2 3; do
  DPTRAIN_TEST_NAN_AT=1:7 run $np 60 "${common[@]}" --steps 50 --checkpoint-dir "$WORK/ck-nan"
  expect_rc 5 "NaN on $np ranks"
  expect_one_error "at step 7"
  ls "$WORK/ck-nan" 2>/dev/null | grep -q . && fail "a checkpoint was written after NaN"
done
# --skip-nonfinite 1 skips that step and finishes.
DPTRAIN_TEST_NAN_AT=1:7 run 2 60 "${common[@]}" --steps 20 --skip-nonfinite 1
expect_rc 0 "--skip-nonfinite 1"
grep -q "non-finite gradient at step 7" "$ERR" || fail "skipped step not reported"

# --- a perturbed tower is caught by the consistency check ---------------------
DPTRAIN_TEST_PERTURB_AT=2:12 run 3 60 "${common[@]}" --steps 50 --check-every 10
expect_rc 5 "perturbed tower"
expect_one_error "rank(s) 2 differ"
echo PASS
