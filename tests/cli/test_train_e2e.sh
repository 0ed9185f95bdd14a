# End to end on 2 ranks: a learnable synthetic set is learned, the metrics
# file holds train, eval and summary events with the docs/design.md fields, and
# --help, --config with command-line override work.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 1200 --val-n 300 --shape 4,5 --classes 4 --dtype uint8 --seed 3
cat >"$WORK/job.ini" <<INI
# a comment
data = $WORK/d.h5
model = dense:32,relu,dense:4
batch-size = 50
epochs = 99
lr = 0.01
log-every = 5
INI
run 2 120 train --config "$WORK/job.ini" --epochs 4 --metrics "$WORK/m.jsonl" --device cpu --seed 5
expect_rc 0 "training"
grep -q "^step 10/96" "$OUT" || { cat "$OUT"; fail "no progress line for step 10"; }

"$PYTHON" - "$WORK/m.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
train = [e for e in ev if e["event"] == "train"]
evals = [e for e in ev if e["event"] == "eval"]
summ = [e for e in ev if e["event"] == "summary"]
assert len(summ) == 1, summ
s = summ[0]
assert s["steps"] == 96 and s["samples"] == 4800 and s["ranks"] == 2 and s["device"] == "cpu", s
assert s["samples_per_s"] > 0 and s["wall_s"] > 0
assert len(train) == 96 // 5 + 1, len(train)        # every 5 steps, and the last
assert [e["step"] for e in train][:2] == [5, 10]
for e in train:
    assert set(e["ms"]) == {"data", "forward", "backward", "comm", "optimizer"}, e
    assert e["lr"] > 0 and e["samples_per_s"] > 0
assert [e["epoch"] for e in evals] == [1, 2, 3, 4], evals
assert all(e["set"] == "test" for e in evals)
assert train[-1]["loss"] < train[0]["loss"], "loss did not go down"
assert evals[-1]["accuracy"] > 0.8, evals[-1]
# memory_mib, to the KiB: 804 fp32 parameters (20-32-4), Adam's two
# moments of as many, no device of its own, a process's resident memory.
m = s["memory_mib"]
# The planned activations and the measured high-water mark of the backend's
# buffers, which hold at least parameters, gradients, moments and those.
assert set(m) == {"params", "optimizer", "peak_device", "peak_host", "activations", "peak_buffers"}, m
mib = 4 / 2**20
assert abs(m["params"] - 804 * mib) <= 1 / 2048 and abs(m["optimizer"] - 2 * 804 * mib) <= 1 / 2048, m
assert m["peak_device"] == 0 and 8 < m["peak_host"] < 65536, m
assert m["activations"] > 0 and m["peak_buffers"] >= 2 * m["params"] + m["optimizer"] + m["activations"] - 1 / 1024, m
PY
grep -q "peak memory of a rank: host [0-9.]* MiB, device 0.0 MiB" "$OUT" || fail "no peak memory in the final line"
# --shard-optimizer: each rank keeps its slice of the moments, 402 of 804.
run 2 120 train --config "$WORK/job.ini" --steps 4 --shard-optimizer --metrics "$WORK/m2.jsonl" --device cpu
expect_rc 0 "sharded training"
"$PYTHON" - "$WORK/m2.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][0]["memory_mib"]
assert abs(m["optimizer"] - 2 * 402 * 4 / 2**20) <= 1 / 2048, m
PY

# Block shuffling follows the file's chunks by default: 28x28 uint8 rows in
# about 1 MiB chunks are 1337 rows a chunk, the nearest multiple to 1024.
synthetic "$WORK/c.h5" --n 3000 --val-n 100 --shape 28,28 --classes 4 --dtype uint8 --seed 2
run 1 60 train --data "$WORK/c.h5" --val-set "" --shuffle block --steps 3 --device cpu
expect_rc 0 "block shuffle"
grep -q "shuffle block (blocks of 1337 rows, 64 per window)" "$OUT" || { cat "$OUT"; fail "blocks do not follow the chunks"; }
run 1 60 train --data "$WORK/c.h5" --val-set "" --shuffle block --shuffle-block-rows 100 --steps 3 --device cpu
expect_rc 0 "block shuffle, explicit block rows"
grep -q "blocks of 100 rows" "$OUT" || { cat "$OUT"; fail "--shuffle-block-rows ignored"; }

run 1 30 train --help
expect_rc 0 "train --help"
grep -q -- "--batch-size" "$OUT" || fail "train --help does not list --batch-size"
run 1 30 --help
expect_rc 0 "--help"
grep -q "inspect" "$OUT" || fail "--help does not list the commands"
echo PASS
