# Augmentation (--augment crop:2,flip) and dropout on images draw from (seed,
# epoch, global sample position) only: 1 and 3 ranks (global batch 20:
# shards 7, 7, 6) log the same loss at every step and end with the same
# weights, within the float tolerance test_rank_invariance.sh explains. A
# control run without --augment must differ, or the option did nothing.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 120 --val-n 20 --shape 8,8 --classes 3 --dtype uint8 --seed 5
spec=conv:4:3,bn,relu,dropout:0.2,maxpool:2,flatten,dense:3
common=(train --data "$WORK/d.h5" --model "$spec" --batch-size 20 --epochs 2 --log-every 1
        --optimizer sgd --momentum 0.9 --lr 0.05 --seed 6 --device cpu --threads 1 --val-set "")
for np in 1 3; do
  run $np 120 "${common[@]}" --augment crop:2,flip --metrics "$WORK/m-$np.jsonl" --save "$WORK/w-$np.h5"
  expect_rc 0 "augmented run on $np ranks"
done
run 1 120 "${common[@]}" --save "$WORK/plain.h5"
expect_rc 0 "run without augmentation"

"$PYTHON" - "$WORK" <<'PY' || fail "augmented runs on 1 and 3 ranks differ"
import json, sys, h5py, numpy as np
w = sys.argv[1]
loss = lambda f: [e["loss"] for e in map(json.loads, open(f)) if e["event"] == "train"]
l1, l3 = loss(f"{w}/m-1.jsonl"), loss(f"{w}/m-3.jsonl")
assert len(l1) == len(l3) == 12, (len(l1), len(l3))
worst = max(abs(a - b) / max(1e-3, abs(b)) for a, b in zip(l3, l1))
assert worst < 1e-4, f"losses differ by {worst:.3g}: {l1} vs {l3}"
# Relative to each tensor's scale, at least 1e-2: conv0's bias feeds a bn,
# so its gradient is zero but for rounding and its values stay within 1e-6
# of 0, measured 3e-7 apart (the same without --augment).
def diff(a, b):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        return max(float(np.abs(fa["model"][l][t][()] - fb["model"][l][t][()]).max() /
                         max(1e-2, np.abs(fb["model"][l][t][()]).max()))
                   for l in fa["model"] for t in fa["model"][l])
ranks, control = diff(f"{w}/w-3.h5", f"{w}/w-1.h5"), diff(f"{w}/plain.h5", f"{w}/w-1.h5")
assert ranks < 1e-4, f"weights of 3 ranks differ from 1 rank by {ranks:.3g}"
assert control > 1e-2, f"--augment changed nothing ({control:.3g})"
print(f"losses within {worst:.2e}, weights within {ranks:.2e}; without --augment {control:.2e}")
PY
run 1 60 "${common[@]}" --augment crop:0
expect_rc 2 "--augment crop:0"
expect_one_error "crop:P needs an integer P >= 1"
echo PASS
