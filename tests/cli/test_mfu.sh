# Train events of token models carry mfu (docs/design.md section 5):
# - with --peak-tflops P on 2 ranks, every train event's mfu is its
#   tokens/s times the model FLOPs per token, counted here from the saved
#   weights (6 N + 12 L T D, N without the token and position tables),
#   over 2 P; the progress lines show it and the start-up summary names
#   the peak;
# - without a peak (a CPU names no device) there is no mfu and the summary
#   says why; an image model never has one;
# - a negative or non-finite --peak-tflops is exit 2 on every rank.
source "$(dirname "$0")/lib.sh"

random_tokens "$WORK/tok.h5" 64 9 48 0 3
gpt="embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dense:16)),ln,dense:64"
common=(train --data "$WORK/tok.h5" --model "$gpt" --batch-size 8 --steps 6 --log-every 2
        --val-set "" --optimizer adamw --device cpu --threads 1 --seed 2)

peak=0.0005  # TFLOPS: mfu of order 1 at these tiny FLOP counts
run 2 120 "${common[@]}" --peak-tflops "$peak" --metrics "$WORK/m.jsonl" --save "$WORK/gpt.h5"
expect_rc 0 "train with --peak-tflops"
grep -q "dptrain: model FLOPs .* per token (6 N + 12 L T D); mfu against 0.0005 TFLOPS a device (--peak-tflops)" "$OUT" ||
  { cat "$OUT" >&2; fail "the start-up summary does not name the peak"; }
[[ $(grep -c "tokens/s mfu [0-9.]* |" "$OUT") -eq 3 ]] || { cat "$OUT" >&2; fail "progress lines without mfu"; }
"$PYTHON" - "$WORK/m.jsonl" "$WORK/gpt.h5" "$peak" <<'PY'
import json, sys, h5py
events = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
assert len(events) == 3, events
matmul = 0
with h5py.File(sys.argv[2], "r") as f:
    def count(name, obj):
        global matmul
        if isinstance(obj, h5py.Dataset) and not name.startswith(("embed", "pos")):
            matmul += obj.size
    f["model"].visititems(count)
t, d, layers = 8, 16, 2
flops = 6 * matmul + 12 * layers * t * d
for e in events:
    want = e["tokens_per_s"] * flops / (2 * float(sys.argv[3]) * 1e12)
    # tokens_per_s is rounded to a whole token, mfu to 4 decimals.
    tol = 0.5 * flops / (2 * float(sys.argv[3]) * 1e12) + 5e-5 + 1e-6 * want
    assert abs(e["mfu"] - want) <= tol, (e, want, flops)
    assert e["mfu"] > 0, e
PY

run 1 120 "${common[@]}" --metrics "$WORK/none.jsonl"
expect_rc 0 "train without a peak"
grep -q "no dense peak known for this device (--peak-tflops names one)" "$OUT" ||
  { cat "$OUT" >&2; fail "the summary does not say why there is no mfu"; }
if grep -q '"mfu"' "$WORK/none.jsonl" || grep -q " mfu " "$OUT"; then fail "mfu without a peak"; fi

synthetic "$WORK/img.h5" --n 32 --shape 6 --classes 3
run 1 120 train --data "$WORK/img.h5" --model "dense:8,relu,dense:3" --batch-size 8 --steps 2 \
  --log-every 1 --val-set "" --peak-tflops 1 --metrics "$WORK/img.jsonl" --device cpu --threads 1
expect_rc 0 "an image model with --peak-tflops"
if grep -q '"mfu"' "$WORK/img.jsonl"; then fail "an image model reported mfu"; fi

for bad in -1 nan inf; do
  run 2 60 "${common[@]}" --peak-tflops "$bad"
  expect_rc 2 "--peak-tflops $bad"
  expect_one_error "--peak-tflops must be a finite number >= 0"
done
echo "ok: mfu"
