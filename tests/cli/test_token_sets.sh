# Token sets (/<set>/tokens [N, T+1] with vocab_size) train a small GPT the
# way feature sets train anything else:
# - every reader (rank0, node, all), cached or streamed, one file or a list
#   of files, gives bitwise the same weights and optimizer state;
# - 1 and 3 ranks (a global batch of 14) give the same losses and weights up
#   to float rounding;
# - a run stopped at a checkpoint and resumed ends bitwise where an
#   uninterrupted one does; resumed on another rank count it continues;
# - eval reports per-token loss and accuracy; bad token sets and models
#   that do not fit them are exit 3 and 2 with the file, set and index.
source "$(dirname "$0")/lib.sh"

# Windows of a repeating pattern with noise, uint16 ids under vocab_size 300.
"$PYTHON" - "$WORK" <<'PY'
import sys, h5py, numpy as np
work = sys.argv[1]
rng = np.random.default_rng(7)
def stream(n):
    base = np.tile(np.array([3, 17, 260, 41, 5, 299, 17, 8], dtype=np.int64), n // 8 + 1)[:n]
    noise = rng.integers(0, 300, n)
    return np.where(rng.random(n) < 0.2, noise, base)
def windows(s, t):
    n = (len(s) - 1) // t
    return np.stack([s[i * t:i * t + t + 1] for i in range(n)])
train, test = windows(stream(1201), 12), windows(stream(241), 12)   # [100, 13], [20, 13]
def write(path, parts, dtype="uint16", chunk=16):
    with h5py.File(path, "w") as f:
        for name, rows in parts:
            d = f.create_dataset(name + "/tokens", data=rows.astype(dtype), chunks=(min(chunk, len(rows)), 13))
            d.attrs["vocab_size"] = 300
write(f"{work}/tok.h5", [("train", train), ("test", test)])
write(f"{work}/part1.h5", [("train", train[:37]), ("test", test[:7])])
write(f"{work}/part2.h5", [("train", train[37:]), ("test", test[7:])])
open(f"{work}/list.txt", "w").write("part1.h5\npart2.h5\n")
PY

gpt="embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dense:16)),ln,dense:300"
common=(--model "$gpt" --batch-size 14 --optimizer adamw --lr 0.003 --weight-decay 0.1
        --weight-decay-params matrices --clip-grad-norm 1 --seed 4 --device cpu --threads 1)

# Two GPTs trained alike up to float rounding (another rank count): every
# tensor within 1e-3 of its scale (measured: 3e-5 after 20 steps), but for
# the key projection's bias (rows D..2D of in_proj_bias). Its gradient is
# exactly zero in exact arithmetic (softmax ignores a constant added to a
# row of scores), so Adam turns each run's rounding noise into steps of up
# to lr in either direction: it is only bounded by lr per step.
same_gpt() {  # same_gpt A B STEPS
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys, h5py, numpy as np
a, b, steps = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), int(sys.argv[3])
names = []
a["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in sorted(names):
    x, y = a["model"][n][()].astype(np.float64), b["model"][n][()].astype(np.float64)
    if n.endswith("in_proj_bias"):
        d = len(x) // 3
        key = np.abs(x[d:2 * d] - y[d:2 * d]).max()
        assert key <= 0.003 * steps, f"{n}: the key bias moved apart by {key} in {steps} steps"
        x, y = np.delete(x, np.s_[d:2 * d]), np.delete(y, np.s_[d:2 * d])
    err = np.abs(x - y).max() / (np.abs(y).max() + 1e-3)
    assert err < 1e-3, f"{n} differs by {err:.3g} of its scale"
PY
}

# Readers, caching and file lists: bitwise the same training.
for case in "tok.h5 full 1024" "tok.h5 block 0" "list.txt full 1024" "list.txt none 0"; do
  read -r data shuffle cache <<<"$case"
  for readers in rank0 node all; do
    run 3 120 train --data "$WORK/$data" "${common[@]}" --epochs 2 --shuffle "$shuffle" \
      --input-cache-mb "$cache" --shuffle-block-rows 8 --shuffle-window-blocks 3 \
      --input-readers $readers --val-set "" --save "$WORK/$readers.h5"
    expect_rc 0 "$data, --shuffle $shuffle, cache $cache, --input-readers $readers"
  done
  same_state "$WORK/rank0.h5" "$WORK/node.h5" || fail "$case: node readers differ from rank0"
  same_state "$WORK/rank0.h5" "$WORK/all.h5" || fail "$case: every-rank readers differ from rank0"
  if [[ $shuffle == none ]]; then
    run 3 120 train --data "$WORK/tok.h5" "${common[@]}" --epochs 2 --shuffle none --val-set "" \
      --save "$WORK/one_file.h5"
    same_state "$WORK/rank0.h5" "$WORK/one_file.h5" || fail "the list of two files differs from one file"
  fi
done

# 1 and 3 ranks: the same per-token losses (train events each step) and weights.
for np in 1 3; do
  run $np 120 train --data "$WORK/tok.h5" "${common[@]}" --steps 20 --log-every 1 \
    --metrics "$WORK/m$np.jsonl" --save "$WORK/r$np.h5"
  expect_rc 0 "20 steps on $np rank(s)"
done
grep -q "tokens/s" "$OUT" || { cat "$OUT"; fail "the progress line reports no tokens/s"; }
# float32 sums in another order: about 1e-6 relative per step, 20 steps of
# AdamW; measured 2e-6 on the losses. A wrong scale (1/B instead of
# 1/(B·T)) or a lost shard is off by far more.
"$PYTHON" - "$WORK/m1.jsonl" "$WORK/m3.jsonl" <<'PY' || fail "1 and 3 ranks disagree"
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"train"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
assert worst < 1e-4, f"losses differ by {worst:.3g}: {a[:3]} vs {b[:3]}"
assert a[-1] < a[0] - 1.0, f"the loss did not fall: {a[0]} -> {a[-1]}"
print(f"1 vs 3 ranks: losses within {worst:.2e}, {a[0]:.3f} -> {a[-1]:.3f}")
PY
same_gpt "$WORK/r1.h5" "$WORK/r3.h5" 20 || fail "1 and 3 ranks end with other weights"

# Bitwise resume, and resume on another rank count.
run 2 120 train --data "$WORK/tok.h5" "${common[@]}" --steps 16 --checkpoint-dir "$WORK/ck" \
  --checkpoint-every 8 --save "$WORK/whole.h5"
expect_rc 0 "16 steps with checkpoints"
mkdir -p "$WORK/ck8" && cp "$WORK/ck/"*000008* "$WORK/ck8/"
run 2 120 train --data "$WORK/tok.h5" "${common[@]}" --steps 16 --checkpoint-dir "$WORK/ck8" \
  --resume auto --save "$WORK/resumed.h5"
expect_rc 0 "resume from step 8"
grep -q "step 8" "$OUT" || { cat "$OUT"; fail "did not resume from step 8"; }
same_state "$WORK/whole.h5" "$WORK/resumed.h5" || fail "a resumed GPT run differs from an uninterrupted one"
run 3 120 train --data "$WORK/tok.h5" "${common[@]}" --steps 16 --resume "$WORK/ck8/ckpt-000000008.h5" \
  --save "$WORK/resumed3.h5"
expect_rc 0 "resume from step 8 on 3 ranks"
same_gpt "$WORK/whole.h5" "$WORK/resumed3.h5" 8 || fail "resumed on 3 ranks, the run went elsewhere"

# eval: per-token loss and accuracy of the test set.
run 2 60 eval --checkpoint "$WORK/whole.h5" --data "$WORK/tok.h5" --set test
expect_rc 0 "eval of a GPT"
grep -Eq "loss [0-9.]+, accuracy 0\.[0-9]+" "$OUT" || { cat "$OUT"; fail "eval prints no loss and accuracy"; }
accuracy=$(grep -Eo "accuracy 0\.[0-9]+" "$OUT" | cut -d' ' -f2)
# predict: the argmax per position [N, T]; the logits [N, T, V] only with --logits.
run 2 60 predict --checkpoint "$WORK/whole.h5" --data "$WORK/tok.h5" --set test --output "$WORK/p.h5"
expect_rc 0 "predict of a GPT"
run 2 60 predict --checkpoint "$WORK/whole.h5" --data "$WORK/tok.h5" --set test --output "$WORK/pl.h5" --logits
expect_rc 0 "predict --logits of a GPT"
"$PYTHON" - "$WORK" "$accuracy" <<'PY' || fail "predict on a token set"
import sys, h5py, numpy as np
work, accuracy = sys.argv[1], float(sys.argv[2])
p, pl = h5py.File(f"{work}/p.h5", "r")["predictions"], h5py.File(f"{work}/pl.h5", "r")["predictions"]
assert list(p.keys()) == ["labels"], list(p.keys())
labels, logits = pl["labels"][()], pl["logits"][()]
assert labels.shape == (20, 12) and logits.shape == (20, 12, 300), (labels.shape, logits.shape)
assert np.array_equal(labels, p["labels"][()]) and np.array_equal(labels, logits.argmax(-1))
targets = h5py.File(f"{work}/tok.h5", "r")["test/tokens"][()][:, 1:]
assert abs((labels == targets).mean() - accuracy) < 1e-6, ((labels == targets).mean(), accuracy)
PY

# generate: the same seed gives the same ids, past T = 12 positions (the
# context slides); another seed others; ids the model cannot take, more than
# one process and a model that is not a language model are usage errors.
gen() { run 1 60 generate --checkpoint "$WORK/whole.h5" --tokens 30 --threads 1 "$@"; }
gen --prompt-ids 3,17,260 --seed 5 --top-k 20
expect_rc 0 "generate"
first=$(cat "$OUT")
gen --prompt-ids 3,17,260 --seed 5 --top-k 20
[[ $(cat "$OUT") == "$first" ]] || fail "generate with one seed gave two texts: $first / $(cat "$OUT")"
gen --prompt-ids 3,17,260 --seed 6 --top-k 20
[[ $(cat "$OUT") != "$first" ]] || fail "generate ignored --seed"
[[ $(tr ',' '\n' <<<"$first" | wc -l) -eq 30 ]] || fail "generate did not write 30 ids: $first"
gen --prompt-ids 3,17,260 --temperature 0
expect_rc 0 "greedy generate"
gen --prompt-ids 3,300
expect_rc 2 "an id outside the vocabulary"
expect_one_error "--prompt-ids: '300' (item 1) is not an id in [0, 300)"
run 2 60 generate --checkpoint "$WORK/whole.h5" --prompt-ids 3 --tokens 2
expect_rc 2 "generate on 2 ranks"
expect_one_error "generate runs on one process"

# Bad token sets (exit 3) and models that do not fit them (exit 2): one
# clear line naming the file, set and first bad index, on 2 ranks, no hang.
"$PYTHON" - "$WORK" <<'PY'
import sys, h5py, numpy as np
work = sys.argv[1]
good = np.arange(40, dtype=np.int32).reshape(8, 5) % 30
def write(name, data, vocab=30, attr=True):
    with h5py.File(f"{work}/{name}.h5", "w") as f:
        d = f.create_dataset("train/tokens", data=data)
        if attr: d.attrs["vocab_size"] = vocab
write("good", good)
out = good.copy(); out[6, 3] = 30
write("out_of_vocab", out)
neg = good.copy(); neg[2, 0] = -1
write("negative", neg)
write("no_vocab", good, attr=False)
write("short", good[:, :1])
write("float_ids", good.astype(np.float32))
PY
bad() {  # bad RC FILE WHAT ARGS...
  local want=$1 file=$2 what=$3
  shift 3
  run 2 60 train --data "$WORK/$file.h5" --val-set "" --batch-size 4 --steps 2 --threads 1 "$@"
  expect_rc "$want" "$file"
  expect_one_error "$what"
}
small=(--model "embed:8,pos,res(ln,attn:2:causal),dense:30")
bad 3 out_of_vocab "out_of_vocab.h5: /train/tokens: id 30 at index 6 (position 3 of the window) is outside [0, 30)" "${small[@]}"
bad 3 negative "id -1 at index 2 (position 0 of the window)" "${small[@]}"
bad 3 no_vocab "no_vocab.h5: /train/tokens: no vocab_size attribute" "${small[@]}"
bad 3 short "short.h5: /train/tokens: windows of T+1 = 1 token" "${small[@]}"
bad 3 float_ids "float_ids.h5: /train/tokens: dtype float32 is not supported" "${small[@]}"
bad 2 good "has vocab_size 30 but the model's last layer gives 29 outputs" --model embed:8,dense:29
bad 2 good "--model gives [30] per sample, but" --model embed:8,gap,dense:30
bad 2 good "trains a language model with --loss xent" "${small[@]}" --loss mse
bad 2 good "must begin with embed:D, not 'dense:8'" --model dense:8,dense:30
bad 2 good "--augment transforms images" "${small[@]}" --augment flip
synthetic "$WORK/features.h5" --n 20 --val-n 4 --shape 6 --classes 3 --seed 1
run 2 60 train --data "$WORK/features.h5" --model embed:4,dense:3 --steps 1 --threads 1
expect_rc 2 "embed on a feature set"
expect_one_error "must be the first layer of a model trained on a token set"
run 1 60 train --data "$WORK/features.h5" --model dense:3 --steps 1 --threads 1 --save "$WORK/mlp.h5"
expect_rc 0 "an MLP"
run 1 60 generate --checkpoint "$WORK/mlp.h5" --prompt hello
expect_rc 2 "generate from an MLP"
expect_one_error "not a language model"

echo "token sets: readers, lists, rank counts and resume all agree; bad sets refused"
