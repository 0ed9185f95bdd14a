# The sample inputs in data/samples/ ship with the clone and train as the
# README there says: Fashion-MNIST far above chance (10%), the regression
# set well below the loss of predicting zero.
source "$(dirname "$0")/lib.sh"
samples=$DPTRAIN_SOURCE_DIR/data/samples

for f in fashion_mnist_2k regression_small; do
  [[ -f $samples/$f.h5 ]] || fail "data/samples/$f.h5 is missing"
  run 1 60 inspect "$samples/$f.h5"
  expect_rc 0 "inspect $f"
done

run 2 120 train --config "$DPTRAIN_SOURCE_DIR/jobs/fashion_mnist.ini" --data "$samples/fashion_mnist_2k.h5" \
  --epochs 5 --warmup-steps 10 --device cpu --threads 1 --metrics "$WORK/fm.jsonl"
expect_rc 0 "training on the Fashion-MNIST sample"
run 2 120 train --config "$DPTRAIN_SOURCE_DIR/jobs/synthetic_regression.ini" --data "$samples/regression_small.h5" \
  --epochs 30 --warmup-steps 10 --device cpu --threads 1 --metrics "$WORK/reg.jsonl"
expect_rc 0 "training on the regression sample"

"$PYTHON" - "$WORK/fm.jsonl" "$WORK/reg.jsonl" "$samples/regression_small.h5" <<'PY'
import json, sys, h5py, numpy as np
last_eval = lambda p: [e for e in map(json.loads, open(p)) if e["event"] == "eval"][-1]
fm = last_eval(sys.argv[1])
assert fm["accuracy"] > 0.6, fm
reg = last_eval(sys.argv[2])
with h5py.File(sys.argv[3]) as f:
    zero_loss = float(np.mean(f["test/labels"][()] ** 2))  # mse of predicting 0
assert reg["loss"] < 0.5 * zero_loss, (reg, zero_loss)
print(f"sample accuracy {fm['accuracy']:.3f}; regression loss {reg['loss']:.3f} vs {zero_loss:.3f}")
PY
echo PASS
