# eval on a saved checkpoint reports the accuracy the training run reported
# at that step (on 1 and 3 ranks); predict writes /predictions; inspect
# summarizes data and checkpoints; --init-from takes weights written by h5py;
# --eval-every and --eval-batches schedule and bound evaluation in training.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 500 --val-n 123 --shape 6 --classes 4 --dtype uint8 --seed 12
run 2 120 train --data "$WORK/d.h5" --model dense:16,gelu,dense:4 --batch-size 32 --epochs 2 \
  --seed 3 --device cpu --metrics "$WORK/m.jsonl" --save "$WORK/final.h5"
expect_rc 0 "training"
want=$("$PYTHON" -c "import json,sys; e=[json.loads(l) for l in open(sys.argv[1])]; print([x for x in e if x['event']=='eval'][-1]['accuracy'])" "$WORK/m.jsonl")
for np in 1 3; do
  run $np 60 eval --checkpoint "$WORK/final.h5" --data "$WORK/d.h5" --set test --eval-batch-size 50 --metrics "$WORK/e.jsonl"
  expect_rc 0 "eval on $np ranks"
  got=$("$PYTHON" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['accuracy'])" "$WORK/e.jsonl")
  "$PYTHON" -c "import sys; a,b=map(float,sys.argv[1:]); sys.exit(abs(a-b) > 1e-9)" "$got" "$want" ||
    fail "eval on $np ranks: accuracy $got, training reported $want"
  grep -q "accuracy" "$OUT" || fail "eval printed no accuracy"
done

run 3 60 predict --checkpoint "$WORK/final.h5" --data "$WORK/d.h5" --set test --output "$WORK/p.h5" --eval-batch-size 40
expect_rc 0 "predict"
"$PYTHON" - "$WORK/p.h5" "$WORK/d.h5" "$want" <<'PY'
import sys, h5py, numpy as np
p, d = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
logits, labels = p["predictions/logits"][()], p["predictions/labels"][()]
assert logits.shape == (123, 4) and logits.dtype == np.float32, logits.shape
assert labels.shape == (123,) and labels.dtype == np.int32
assert (labels == logits.argmax(1)).all()
acc = (labels == d["test/labels"][()]).mean()
assert abs(acc - float(sys.argv[3])) < 1e-9, (acc, sys.argv[3])
PY

run 1 30 inspect "$WORK/d.h5"
expect_rc 0 "inspect data"
grep -q "train" "$OUT" && grep -q "uint8" "$OUT" && grep -qi "histogram\|class" "$OUT" || { cat "$OUT"; fail "inspect data output"; }
run 1 30 inspect "$WORK/final.h5"
expect_rc 0 "inspect checkpoint"
grep -q "dense:16,gelu,dense:4" "$OUT" || { cat "$OUT"; fail "inspect checkpoint output"; }
run 2 30 inspect "$WORK/nothing.h5"
[[ $RC -ne 0 ]] || fail "inspect of a missing file succeeded"

# --init-from a weights-only file written by h5py: a run with a vanishing
# learning rate keeps exactly those weights; without it the weights differ.
"$PYTHON" "$DPTRAIN_SOURCE_DIR/tests/cli/init_from_h5py.py" "$WORK/w.h5" --layers 6,16,4 --seed 5
run 2 60 train --data "$WORK/d.h5" --model dense:16,relu,dense:4 --batch-size 32 --steps 1 \
  --optimizer sgd --lr 1e-30 --val-set "" --init-from "$WORK/w.h5" --save "$WORK/i.h5"
expect_rc 0 "--init-from"
compare_models "$WORK/i.h5" "$WORK/w.h5" 1e-6 || fail "--init-from weights not used"
run 2 60 train --data "$WORK/d.h5" --model dense:16,relu,dense:4 --batch-size 32 --steps 1 \
  --optimizer sgd --lr 1e-30 --val-set "" --save "$WORK/j.h5"
compare_models "$WORK/j.h5" "$WORK/w.h5" 1e-6 && fail "fresh init equals the h5py weights"
run 2 60 train --data "$WORK/d.h5" --model dense:8,relu,dense:4 --steps 1 --init-from "$WORK/w.h5"
expect_rc 4 "--init-from with mismatched shapes"
expect_one_error "dense0"

# --eval-every 6 evaluates after steps 6, 12 and 18 besides the epoch end
# (16 steps of 32 make an epoch of 500) and the end; --eval-batches 2 (of
# 25) covers the first 50 test samples, so the last evaluation's loss and
# accuracy are those of `eval` on a file whose test set is those 50.
run 2 120 train --data "$WORK/d.h5" --model dense:16,gelu,dense:4 --batch-size 32 --steps 20 \
  --seed 3 --device cpu --eval-every 6 --eval-batches 2 --eval-batch-size 25 \
  --metrics "$WORK/m2.jsonl" --save "$WORK/e.h5"
expect_rc 0 "training with --eval-every and --eval-batches"
grep -q "eval  step 20 epoch 1 test (first 50 samples): loss" "$OUT" ||
  { cat "$OUT"; fail "no evaluation line naming the first 50 samples"; }
"$PYTHON" - "$WORK/d.h5" "$WORK/d50.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as d, h5py.File(sys.argv[2], "w") as o:
    for name in ("features", "labels"):
        o["train/" + name] = d["train/" + name][()]
        o["test/" + name] = d["test/" + name][:50]
PY
run 2 60 eval --checkpoint "$WORK/e.h5" --data "$WORK/d50.h5" --set test --eval-batch-size 25 \
  --metrics "$WORK/e50.jsonl"
expect_rc 0 "eval on the first 50 test samples"
"$PYTHON" - "$WORK/m2.jsonl" "$WORK/e50.jsonl" <<'PY' || fail "--eval-every / --eval-batches events"
import json, sys
evals = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "eval"]
assert [e["step"] for e in evals] == [6, 12, 16, 18, 20], [e["step"] for e in evals]
assert all(e["samples"] == 50 for e in evals), [e["samples"] for e in evals]
ref = json.loads(open(sys.argv[2]).readline())
assert ref["samples"] == 50, ref
last = evals[-1]
assert last["accuracy"] == ref["accuracy"], (last, ref)
assert abs(last["loss"] - ref["loss"]) <= 1e-6 * abs(ref["loss"]), (last, ref)
PY
echo PASS
