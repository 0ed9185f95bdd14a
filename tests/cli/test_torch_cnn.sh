# A small CNN (conv, bn over the global batch, relu, maxpool, a residual
# block with projection, gap, dense) trained by dptrain for 25 steps from
# weights PyTorch wrote through h5py (an --init-from /model-only file) agrees
# with PyTorch (float64, tests/cli/torch_cnn.py) in every weight and running
# statistic: on 1 rank, and on 3 ranks with a global batch of 14 that 3 does
# not divide (shards 5, 5, 4); SGD with momentum and Adam. Skipped when no
# python here imports torch.
source "$(dirname "$0")/lib.sh"

torch_python  # sets torch_py, or skips (77)
here=$(dirname "$0")
spec=$("$torch_py" -c "import sys; sys.path.insert(0, '$here'); import torch_cnn; print(torch_cnn.SPEC)")

synthetic "$WORK/d.h5" --n 70 --val-n 10 --shape 2,8,8 --classes 5 --dtype float32 --seed 4
"$torch_py" "$here/torch_cnn.py" init "$WORK/init.h5" --seed 3

steps=25
# Adam's eps is 1e-4, not 1e-8: a conv bias followed by bn has a gradient
# of exactly zero (bn removes the mean), so what is computed is rounding
# noise of about 1e-9, which eps 1e-8 would turn into full lr-sized steps in
# any two implementations alike, but with different signs. The real
# gradients here are 1e-3 and up, still scaled by Adam's moments.
for opt in "sgd --momentum 0.9 --lr 0.05" "adam --lr 0.01 --eps 1e-4"; do
  name=${opt%% *}
  read -r -a opt_args <<<"--optimizer $opt"
  "$torch_py" "$here/torch_cnn.py" train "$WORK/d.h5" "$WORK/init.h5" "$WORK/torch_$name.h5" \
    "${opt_args[@]}" --batch 14 --steps $steps
  for np in 1 3; do
    run "$np" 300 train --data "$WORK/d.h5" --model "$spec" --init-from "$WORK/init.h5" \
      --batch-size 14 --steps $steps --shuffle none --val-set "" --lr-schedule constant \
      --weight-decay 0 --beta1 0.9 --beta2 0.999 "${opt_args[@]}" \
      --device cpu --threads 1 --save "$WORK/ours_${name}_$np.h5"
    expect_rc 0 "$name on $np rank(s)"
    # Every tensor of the torch model, in float32 against float64. SGD:
    # measured 3e-7 of the tensors' scale, bound 1e-5. Adam divides by the
    # root of the second moment, so the biases before a bn (gradient zero but
    # for rounding) still take steps of 1e-5 of lr from noise: measured up to
    # 1.6e-4, bound 1e-3. A wrong layer, shortcut, statistic or a rank-local
    # bn is off by 1e-2 or more.
    tol=1e-5; [[ $name == adam ]] && tol=1e-3
    "$torch_py" - "$WORK/ours_${name}_$np.h5" "$WORK/torch_$name.h5" "$name/$np" "$tol" <<'PY'
import sys, h5py, numpy as np
ours, ref, what = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), sys.argv[3]
tol = float(sys.argv[4])
names = []
ref["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert len(names) == 26, names  # 4 conv, 4 bn, 1 dense
worst = 0.0
for n in names:
    a, b = ours["model/" + n][...].astype(np.float64), ref["model/" + n][...]
    assert a.shape == b.shape, (n, a.shape, b.shape)
    err = np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-3)
    worst = max(worst, err)
    assert err < tol, f"{what}: /model/{n} differs from torch by {err:.3g} of its scale"
print(f"{what}: worst difference {worst:.2e} of a tensor's scale over {len(names)} tensors")
PY
  done
done
echo PASS
