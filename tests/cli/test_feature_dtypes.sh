# Features stored as float32, float16 and int16 holding the same values (small
# integers, exact in all three) train to bitwise the same weights on 3 ranks
# (global batch 26, a short last batch): the reader keeps each type as
# stored, the scatter moves it in that width, and each rank converts its own
# shard exactly. A dtype read, sent or converted wrongly changes the inputs
# and with them every weight. uint8 is covered by the demo and the samples.
source "$(dirname "$0")/lib.sh"

"$PYTHON" - "$WORK" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(5)
def sets(n):
    y = rng.integers(0, 3, size=n).astype(np.int32)
    # One-channel 6x6 images of integers in [-8, 8], shifted by class.
    x = np.clip(np.rint(rng.standard_normal((n, 6, 6)) * 3 + 2 * y[:, None, None] - 2), -8, 8)
    return x, y
train, test = sets(130), sets(30)
for dtype in ("float32", "float16", "int16"):
    with h5py.File(f"{sys.argv[1]}/{dtype}.h5", "w") as f:
        for name, (x, y) in (("train", train), ("test", test)):
            f.create_dataset(f"{name}/features", data=x.astype(dtype), chunks=(16, 6, 6))
            f.create_dataset(f"{name}/labels", data=y)
PY

for dtype in float32 float16 int16; do
  run 1 60 inspect "$WORK/$dtype.h5"
  expect_rc 0 "inspect $dtype"
  grep -q "features: \[130, 6, 6\] $dtype" "$OUT" || { cat "$OUT"; fail "inspect does not show $dtype"; }
  run 3 180 train --data "$WORK/$dtype.h5" --model conv:4:3,relu,maxpool:2,flatten,dense:3 \
    --batch-size 26 --epochs 2 --optimizer adam --lr 0.01 --seed 3 --shuffle full --device cpu \
    --threads 1 --save "$WORK/$dtype-model.h5"
  expect_rc 0 "training on $dtype features"
done
for dtype in float16 int16; do
  compare_models "$WORK/$dtype-model.h5" "$WORK/float32-model.h5" exact ||
    fail "$dtype features train to other weights than the same values in float32"
done
# A control that the comparison can fail: other values give other weights.
"$PYTHON" - "$WORK/float16.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["train/features"][7, 0, 0] += 1
PY
run 3 180 train --data "$WORK/float16.h5" --model conv:4:3,relu,maxpool:2,flatten,dense:3 \
  --batch-size 26 --epochs 2 --optimizer adam --lr 0.01 --seed 3 --shuffle full --device cpu \
  --threads 1 --save "$WORK/changed-model.h5"
expect_rc 0 "training on the changed float16 set"
if compare_models "$WORK/changed-model.h5" "$WORK/float32-model.h5" exact 2>/dev/null; then
  fail "a changed feature value left every weight as it was: the comparison cannot fail"
fi
echo PASS
