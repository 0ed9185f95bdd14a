# bn over the global batch and dropout on 1, 3 and 4 ranks (global batch 26:
# uneven shards, a short last batch) end with the same weights AND running
# statistics within float tolerance: bn sums its statistics over the ranks,
# dropout draws its masks from (seed, epoch, global row). The 1e-4 relative
# tolerance is the one test_rank_invariance.sh explains; bn:local or a
# rank-dependent mask would be off by far more. Every tower holds the same
# running statistics, so rank 0's checkpoint speaks for all.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 250 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 9
spec=dense:16,bn,tanh,dropout:0.3,dense:8,bn,relu,dense:3
for np in 1 3 4; do
  run $np 120 train --data "$WORK/d.h5" --model "$spec" --batch-size 26 --epochs 2 \
    --optimizer sgd --momentum 0.9 --lr 0.05 --seed 4 --device cpu --threads 1 \
    --save "$WORK/m-$np.h5"
  expect_rc 0 "$spec on $np ranks"
done
for np in 3 4; do
  "$PYTHON" - "$WORK/m-$np.h5" "$WORK/m-1.h5" <<'PY' || fail "$np ranks differ from 1"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as fa, h5py.File(sys.argv[2], "r") as fb:
    worst, seen = 0.0, set()
    for layer in fa["model"]:
        for t in fa["model"][layer]:
            x, y = fa["model"][layer][t][()], fb["model"][layer][t][()]
            worst = max(worst, float((np.abs(x - y) / (1e-3 + np.abs(y))).max()))
            seen.add(t)
    assert {"running_mean", "running_var"} <= seen, seen
    if worst > 1e-4:
        sys.exit(f"worst relative difference {worst} > 1e-4")
    print(f"worst relative difference {worst:.2e}")
PY
done
echo PASS
