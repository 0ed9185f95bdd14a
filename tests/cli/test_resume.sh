# Exact continuation: N steps straight vs N/2 + resume + N/2 give bitwise
# identical weights on the same number of ranks, and match within float
# tolerance when resumed on 1 -> 2 and 3 -> 2 ranks. --resume auto skips a
# corrupt newest checkpoint; --resume FILE with a bad file exits 4.
# The 1e-4 tolerance is chosen as in test_rank_invariance.sh (rounding about
# 1e-6 relative, a wrong resume point or lost state over 1e-2).
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 300 --val-n 50 --shape 5 --classes 3 --dtype float32 --seed 2
common=(train --data "$WORK/d.h5" --model dense:16,relu,dense:3 --batch-size 20 --optimizer adam
        --lr 0.01 --lr-schedule cosine --warmup-steps 3 --seed 8 --device cpu --threads 1 --log-every 5)
N=40  # 2 epochs + 10 steps: the resume point (20) is mid-way through epoch 1

run 2 120 "${common[@]}" --steps $N --save "$WORK/straight.h5"
expect_rc 0 "straight run"

resume_case() {  # resume_case NP_FIRST NP_SECOND TOLERANCE
  # The first run stands for a job that died after step N/2: same --steps
  # (so the cosine schedule is the same), its checkpoint at N/2 resumed.
  local dir=$WORK/ck-$1-$2
  run "$1" 120 "${common[@]}" --steps $N --checkpoint-dir "$dir" --checkpoint-every $((N / 2)) --keep-checkpoints 0
  expect_rc 0 "first run on $1 ranks"
  [[ -f $dir/ckpt-000000020.h5 ]] || fail "no checkpoint at step 20"
  run "$2" 120 "${common[@]}" --steps $N --resume "$dir/ckpt-000000020.h5" --save "$WORK/resumed-$1-$2.h5"
  expect_rc 0 "second half on $2 ranks"
  grep -q "resuming from .*ckpt-000000020.h5" "$OUT" || fail "did not resume from step 20"
  compare_models "$WORK/resumed-$1-$2.h5" "$WORK/straight.h5" "$3" || fail "resume $1 -> $2 ranks"
}
resume_case 2 2 exact
resume_case 1 2 1e-4
resume_case 3 2 1e-4

# Sample order continues too: the checkpoint records the cursor.
"$PYTHON" - "$WORK/ck-2-2/ckpt-000000020.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
assert a["format"] == "dptrain-checkpoint" and a["version"] == 2
assert list(a["input_shape"]) == [5], a["input_shape"]
assert (a["step"], a["epoch"], a["epoch_position"]) == (20, 1, 100), (a["step"], a["epoch"], a["epoch_position"])
assert a["world_size"] == 2 and a["model"] == "dense:16,relu,dense:3" and a["loss"] == "xent"
assert f["model/dense0/weight"].shape == (16, 5) and f["model/dense1/bias"].shape == (3,)
assert "batch-size = 20" in a["config"]
PY

# A run that stops at --steps N/2 and is resumed with a longer --steps
# continues too (constant schedule: the learning rate does not depend on it).
const=("${common[@]/cosine/constant}")
run 2 120 "${const[@]}" --steps $N --save "$WORK/straight-const.h5"
run 2 120 "${const[@]}" --steps $((N / 2)) --checkpoint-dir "$WORK/ck-const"
expect_rc 0 "first half"
run 2 120 "${const[@]}" --steps $N --checkpoint-dir "$WORK/ck-const" --save "$WORK/resumed-const.h5"
expect_rc 0 "second half with --resume auto"
compare_models "$WORK/resumed-const.h5" "$WORK/straight-const.h5" exact || fail "--resume auto run differs"

# A truncated newest checkpoint is reported and the previous one used.
dir=$WORK/ck-fallback
run 2 120 "${common[@]}" --steps 20 --checkpoint-every 10 --checkpoint-dir "$dir" --keep-checkpoints 5
expect_rc 0 "periodic checkpoints"
[[ -f $dir/ckpt-000000010.h5 && -f $dir/ckpt-000000020.h5 ]] || fail "periodic checkpoints missing"
truncate -s 2000 "$dir/ckpt-000000020.h5"
run 2 120 "${common[@]}" --steps 25 --checkpoint-dir "$dir"
expect_rc 0 "resume with a truncated newest checkpoint"
grep -q "skipping checkpoint .*ckpt-000000020.h5" "$ERR" || { cat "$ERR"; fail "truncated checkpoint not reported"; }
grep -q "resuming from .*ckpt-000000010.h5" "$OUT" || fail "did not fall back to step 10"

# --keep-checkpoints prunes the old ones.
dir=$WORK/ck-keep
run 1 120 "${common[@]}" --steps 25 --checkpoint-every 5 --checkpoint-dir "$dir" --keep-checkpoints 2
expect_rc 0 "keep 2"
[[ $(ls "$dir" | wc -l) -eq 2 && -f $dir/ckpt-000000025.h5 && -f $dir/ckpt-000000020.h5 ]] ||
  fail "expected the newest 2 checkpoints, got: $(ls "$dir")"

# --resume FILE that is bad: exit 4 on every rank.
printf 'not hdf5' >"$WORK/junk.h5"
run 2 60 "${common[@]}" --steps 5 --resume "$WORK/junk.h5"
expect_rc 4 "--resume junk"
expect_one_error "junk.h5"
run 2 60 "${common[@]}" --steps 5 --resume "$WORK/missing.h5"
expect_rc 4 "--resume missing"
# A checkpoint of another model is refused.
run 1 60 "${common[@]/dense:16,relu,dense:3/dense:8,relu,dense:3}" --steps 5 --resume "$WORK/straight.h5"
expect_rc 4 "--resume with another model"
echo PASS
