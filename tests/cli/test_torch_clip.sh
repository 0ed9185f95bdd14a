# --clip-grad-norm, --weight-decay-params matrices and gelu:tanh against
# PyTorch (tests/cli/torch_clip.py, float64): an MLP trained 20 steps from the same
# weights with clip_grad_norm_ and two parameter groups (decay on the weight
# matrices only), AdamW and SGD with momentum, on 1 rank and on 3 ranks with
# a global batch of 14 that 3 does not divide. Every tensor and every step's
# grad_norm (train events, --log-every 1) must agree. The clip norm is set
# below the gradients' norm, so every step is clipped. Skipped when no
# python here imports torch.
source "$(dirname "$0")/lib.sh"

torch_python  # sets torch_py, or skips (77)
here=$(dirname "$0")
layers=12,16,16,5
synthetic "$WORK/d.h5" --n 70 --val-n 10 --shape 12 --classes 5 --dtype float32 --seed 5
"$torch_py" "$here/torch_clip.py" init "$WORK/init.h5" --layers $layers --seed 3

steps=20
for opt in "adamw --lr 0.01" "sgd --lr 0.1 --momentum 0.9"; do
  name=${opt%% *}
  read -r -a opt_args <<<"--optimizer $opt"
  "$torch_py" "$here/torch_clip.py" train "$WORK/d.h5" "$WORK/init.h5" "$WORK/torch_$name.h5" \
    --layers $layers "${opt_args[@]}" --weight-decay 0.1 --clip 0.3 --batch 14 --steps $steps
  for np in 1 3; do
    run "$np" 300 train --data "$WORK/d.h5" --model dense:16,gelu:tanh,dense:16,relu,dense:5 \
      --init-from "$WORK/init.h5" --batch-size 14 --steps $steps --shuffle none --val-set "" \
      --lr-schedule constant --weight-decay 0.1 --weight-decay-params matrices \
      --clip-grad-norm 0.3 "${opt_args[@]}" --device cpu --threads 1 --log-every 1 \
      --metrics "$WORK/ours_${name}_$np.jsonl" --save "$WORK/ours_${name}_$np.h5"
    expect_rc 0 "$name on $np rank(s)"
    # float32 against float64: the gradients carry about 1e-7 of relative
    # rounding, the norm sums 400 squares of them; over 20 steps the weights
    # measured within 1e-6 of their scale and grad_norm within 3e-7, bounds
    # 1e-4 and 1e-5. Decay on the biases
    # moves them by lr*wd*b a step (about 1e-2 of their scale after 20
    # steps), no clipping by far more: both fail.
    "$torch_py" - "$WORK/ours_${name}_$np" "$WORK/torch_$name.h5" "$name/$np" <<'PY'
import json, sys, h5py, numpy as np
ours, ref, what = sys.argv[1], h5py.File(sys.argv[2], "r"), sys.argv[3]
f = h5py.File(ours + ".h5", "r")
worst = 0.0
for n in ("dense0", "dense1", "dense2"):
    for t in ("weight", "bias"):
        a, b = f[f"model/{n}/{t}"][...].astype(np.float64), ref[f"model/{n}/{t}"][...]
        err = np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-3)
        worst = max(worst, err)
        assert err < 1e-4, f"{what}: /model/{n}/{t} differs from torch by {err:.3g} of its scale"
events = [json.loads(l) for l in open(ours + ".jsonl") if '"train"' in l]
norms = np.array([e["grad_norm"] for e in events])
want = ref["grad_norm"][...]
assert len(norms) == len(want), (len(norms), len(want))
assert np.all(want > 0.3), f"{what}: some step was not clipped: {want}"
rel = np.max(np.abs(norms - want) / want)
assert rel < 1e-5, f"{what}: grad_norm differs from torch by {rel:.3g}"
print(f"{what}: weights within {worst:.2e} of their scale, grad_norm within {rel:.2e}")
PY
  done
done

# Bad values are usage errors (exit 2) naming the option.
run 1 60 train --data "$WORK/d.h5" --model dense:5 --clip-grad-norm -1 --steps 1
expect_rc 2 "--clip-grad-norm -1"
grep -q -- "--clip-grad-norm" "$ERR" || fail "the error does not name --clip-grad-norm"
run 1 60 train --data "$WORK/d.h5" --model dense:5 --weight-decay-params biases --steps 1
expect_rc 2 "--weight-decay-params biases"
grep -q -- "--weight-decay-params 'biases' is not one of: all, matrices" "$ERR" ||
  fail "the error does not name --weight-decay-params and its choices"
echo PASS
