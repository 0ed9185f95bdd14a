# --timeline: one Chrome trace with every rank's phases on one time axis
# (read on rank 0's reader thread, scatter, wait for data, forward, backward,
# each all-reduce bucket, optimizer, log, evaluation, checkpoint), written at
# the end (and on preemption); a bad path is a usage error on every rank.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 600 --val-n 100 --shape 4,5 --classes 4 --seed 3
common=(--data "$WORK/d.h5" --model dense:16,relu,dense:8,relu,dense:4 --batch-size 30
        --log-every 5 --device cpu --threads 1)
# A 1-byte bucket size: one bucket per dense layer (3 buckets).
run 3 120 train "${common[@]}" --epochs 2 --bucket-mb 0.000001 --timeline "$WORK/t.json" \
    --checkpoint-dir "$WORK/ck" --resume never
expect_rc 0 "training with --timeline"
grep -q "timeline: $WORK/t.json" "$OUT" || { cat "$OUT"; fail "no timeline line"; }

"$PYTHON" - "$WORK/t.json" <<'PY'
import json, sys
from collections import defaultdict
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert d["otherData"]["ranks"] == 3 and d["otherData"]["dropped_events"] == 0, d["otherData"]
names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert {p for p, _ in names} == {0, 1, 2}, names
x = [e for e in ev if e["ph"] == "X"]
steps = 40  # 600 / 30 * 2 epochs
per = defaultdict(lambda: defaultdict(list))
for e in x:
    assert e["dur"] >= 0, e
    per[e["pid"]][e["name"]].append(e)
for rank in range(3):
    p = per[rank]
    for name in ["scatter", "wait for data", "forward", "backward", "all-reduce wait", "optimizer",
                 "all-reduce bucket 0", "all-reduce bucket 1", "all-reduce bucket 2"]:
        assert len(p[name]) == steps, (rank, name, len(p[name]))
    assert "all-reduce bucket 3" not in p, "more buckets than dense layers"
    assert len(p["log"]) == 8 and len(p["evaluation"]) == 2 and len(p["checkpoint"]) >= 1, \
        {k: len(v) for k, v in p.items()}
    # Within a step on one rank: data, then forward, backward, optimizer.
    by_step = defaultdict(dict)
    for name in ["wait for data", "forward", "backward", "optimizer"]:
        for e in p[name]:
            by_step[e["args"]["step"]][name] = e
    assert sorted(by_step) == list(range(steps))
    for s, ph in by_step.items():
        order = [ph[n]["ts"] for n in ["wait for data", "forward", "backward", "optimizer"]]
        assert order == sorted(order), (rank, s, order)
    # Buckets start last layer first and never before their step's forward.
    for s in range(steps):
        b = [next(e for e in p["all-reduce bucket %d" % i] if e["args"]["step"] == s) for i in range(3)]
        assert b[0]["ts"] <= b[1]["ts"] <= b[2]["ts"], (rank, s)
        assert b[0]["ts"] >= by_step[s]["forward"]["ts"], (rank, s)
        assert all(e["tid"] == 2 for e in b), (rank, s)
# Only rank 0 reads, on its reader thread; every step's batch is read once.
reads = [e for e in x if e["name"] == "read"]
assert {e["pid"] for e in reads} == {0} and {e["tid"] for e in reads} == {1}, reads[:3]
assert sorted(e["args"]["step"] for e in reads) == list(range(steps))
# One time axis: the same step's forward starts close together on every rank.
for s in (5, 25):
    t = [next(e["ts"] for e in per[r]["forward"] if e["args"]["step"] == s) for r in range(3)]
    assert max(t) - min(t) < 2e6, (s, t)  # us; generous for an oversubscribed machine
PY

# The summary tool reads it: every rank, its phases and their shares.
"$PYTHON" "$DPTRAIN_SOURCE_DIR/tools/timeline_summary.py" "$WORK/t.json" --skip 5 >"$WORK/sum.txt"
for r in 0 1 2; do grep -q "^rank $r (" "$WORK/sum.txt" || { cat "$WORK/sum.txt"; fail "summary lacks rank $r"; }; done
grep -q "all-reduce bucket 2" "$WORK/sum.txt" || { cat "$WORK/sum.txt"; fail "summary lacks the buckets"; }

# An unwritable path fails the run at start, on every rank (exit 2).
run 2 60 train "${common[@]}" --steps 5 --val-set "" --timeline "$WORK/no/such/dir/t.json"
expect_rc 2 "unwritable --timeline path"
grep -q "timeline" "$ERR" || { cat "$ERR"; fail "error does not name --timeline"; }
echo PASS
