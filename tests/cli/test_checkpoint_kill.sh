# A process killed (SIGKILL) while writing a checkpoint leaves the previous
# checkpoint loadable and no half-written file under a final name.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 200 --val-n 20 --shape 5 --classes 3 --dtype float32 --seed 6
dir=$WORK/ck
common=(train --data "$WORK/d.h5" --model dense:8,relu,dense:3 --batch-size 10 --seed 1
        --device cpu --threads 1 --val-set "" --checkpoint-dir "$dir")
run 1 60 "${common[@]}" --steps 5 --checkpoint-every 5
expect_rc 0 "first checkpoint"
[[ -f $dir/ckpt-000000005.h5 ]] || fail "no first checkpoint"

# The test hook sleeps between writing NAME.tmp and renaming it.
DPTRAIN_TEST_SLOW_CHECKPOINT_MS=20000 timeout -k 5 60 "$MPIEXEC" -n 1 "$DPTRAIN" "${common[@]}" \
  --steps 10 --checkpoint-every 5 </dev/null >"$WORK/o" 2>"$WORK/e" &
job=$!
for i in $(seq 1 100); do
  [[ -f $dir/ckpt-000000010.h5.tmp ]] && break
  sleep 0.2
done
[[ -f $dir/ckpt-000000010.h5.tmp ]] || fail "the tmp file never appeared"
pkill -9 -f -- "--checkpoint-dir $dir" || true
wait $job || true
[[ ! -e $dir/ckpt-000000010.h5 ]] || fail "a half-written checkpoint has a final name"
run 1 60 "${common[@]}" --steps 6
expect_rc 0 "resume after the kill"
grep -q "resuming from .*ckpt-000000005.h5" "$OUT" || fail "previous checkpoint not used"
echo PASS
