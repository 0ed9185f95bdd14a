# --shard-params (ZeRO stage 3) against --shard-optimizer and the plain run:
# - 20 steps end with the same weights, bn running statistics and optimizer
#   state as --shard-optimizer on the same ranks, bit for bit: both cut the
#   arena into the same slices, sum every gradient element in rank order
#   and update each slice alike; --shard-params only gathers a top-level
#   layer's parameters before its forward and backward and reduce-scatters
#   its gradient after. An MLP whose arena (173 floats) no rank count
#   divides, a CNN with global bn and dropout inside residual blocks, a GPT
#   with dropout, and the GPT with --recompute blocks; on 1 to 4 ranks, and
#   with a batch smaller than the ranks (empty shards still take part in
#   every gather and reduce-scatter), and with --accumulate (the earlier
#   micro-batches summed unit by unit, in --shard-optimizer's order, then
#   reduce-scattered once; with micro-batches of no rows on some ranks).
#   Evaluation events are equal too.
# - under --precision bf16 (a CPU with bf16 instructions) the gathers move
#   bf16 copies: close to --shard-optimizer's bf16 run, not equal to it.
# - checkpoints: a --shard-params run resumed with --shard-params on the
#   same ranks ends bitwise where the straight one does; sharded parameters
#   on 3 ranks -> plain on 2 -> sharded parameters on 4 continues the
#   straight run within the rounding of other rank counts
#   (test_rank_invariance.sh's bound).
# - resume: rank 0 streams the slices tensor by tensor (the host peak of a
#   resumed run stays near a fresh run's), and a damaged tensor ends every
#   rank with exit 4.
# - memory: the start-up line shows the slices, and the summary's measured
#   peak of the backend's buffers on 4 ranks is at most 0.45x the plain
#   run's (parameters, gradients and AdamW's moments are 16 bytes a
#   parameter replicated, 4 sharded, plus four unit buffers).
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 250 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 9
synthetic "$WORK/img.h5" --n 120 --val-n 20 --shape 2,8,8 --classes 3 --dtype float32 --seed 5
random_tokens "$WORK/tok.h5" 40 9 90 14 3
MLP=(--data "$WORK/d.h5" --model dense:17,tanh,dense:3)
CNN=(--data "$WORK/img.h5" --batch-size 22
     --model "conv:4:3:1:1,bn,relu,res(conv:4:3:1:1,bn,relu,dropout:0.2),res(conv:6:3:2:1,bn),avgpool:4,flatten,dense:3")
GPT=(--data "$WORK/tok.h5" --batch-size 14
     --model "embed:12,pos,res(ln,attn:2:causal),res(ln,dense:24,gelu:tanh,dropout:0.1,dense:12),ln,dense:40")
ADAMW=(--optimizer adamw --lr 0.01 --weight-decay 0.1 --weight-decay-params matrices --clip-grad-norm 0.5)
SGD=(--optimizer sgd --momentum 0.9 --nesterov --lr 0.05)
COMMON=(--seed 4 --device cpu --threads 1 --log-every 10)

# train NP NAME ARGS...: a 20-step run on NP ranks that must succeed, saved as NAME.h5
train() {
  local np=$1 name=$2
  shift 2
  run "$np" 120 train "$@" "${COMMON[@]}" --steps 20 --save "$WORK/$name.h5" --metrics "$WORK/$name.jsonl"
  expect_rc 0 "$name"
}

# evals A B: the eval events of two runs, equal
evals() {
  "$PYTHON" - "$WORK/$1.jsonl" "$WORK/$2.jsonl" <<'PY' || fail "eval events differ: $1, $2"
import json, sys
def evals(p): return [(e["loss"], e["accuracy"]) for e in map(json.loads, open(p)) if e["event"] == "eval"]
a, b = evals(sys.argv[1]), evals(sys.argv[2])
assert a == b and len(a) > 0, (a, b)
PY
}

# --shard-params against --shard-optimizer: NP ARGS...
both() {
  local np=$1
  shift
  train "$np" sliced "$@" --shard-optimizer
  train "$np" sharded "$@" --shard-params
  grep -q "slices 1/$np of" "$OUT" || fail "no sharded-parameter memory line on $np ranks"
  same_state "$WORK/sharded.h5" "$WORK/sliced.h5" || fail "--shard-params differs on $np ranks: $*"
  evals sharded sliced
}
for np in 1 2 3 4; do both $np "${MLP[@]}" --batch-size 26 "${SGD[@]}"; done
both 4 "${MLP[@]}" --batch-size 3 "${ADAMW[@]}"
both 3 "${CNN[@]}" --optimizer adam --lr 0.01
both 2 "${GPT[@]}" "${ADAMW[@]}"
both 4 "${GPT[@]}" "${ADAMW[@]}"
both 3 "${GPT[@]}" "${ADAMW[@]}" --recompute blocks
both 3 "${GPT[@]}" "${ADAMW[@]}" --accumulate 3
both 4 "${MLP[@]}" --batch-size 6 "${SGD[@]}" --accumulate 2
echo "ok: --shard-params equals --shard-optimizer bit for bit"

# Under --precision bf16 (where the CPU has bf16 instructions) the gathers
# move bf16 copies: every parameter reaches the layers rounded to bf16, not
# only the GEMMs' operands, so the run leaves --shard-optimizer's bits but
# stays within bf16's bound of it (3e-2 of the first loss, as the emulated
# GPU's bf16 runs against fp32).
run 2 120 train "${GPT[@]}" "${ADAMW[@]}" "${COMMON[@]}" --steps 20 --precision bf16 --shard-params \
  --save "$WORK/bf16-sharded.h5" --metrics "$WORK/bf16-sharded.jsonl"
if [[ $RC -eq 2 ]] && grep -q "bf16" "$ERR"; then
  echo "skip: bf16 gathers (this CPU has no bf16 instructions)"
else
  expect_rc 0 "--shard-params --precision bf16"
  grep -q "gathered in bf16" "$OUT" || fail "the memory line does not say the units are gathered in bf16"
  train 2 bf16-sliced "${GPT[@]}" "${ADAMW[@]}" --precision bf16 --shard-optimizer
  "$PYTHON" - "$WORK/bf16-sharded.jsonl" "$WORK/bf16-sliced.jsonl" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"event":"train"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
gap = max(abs(p - q) for p, q in zip(a, b)) / abs(b[0])
print(f"bf16 gathers: losses {gap:.3g} of the first off --shard-optimizer's")
assert len(a) == len(b) > 0 and 0 < gap <= 3e-2, (gap, a, b)
PY
  echo "ok: bf16 gathers"
fi

# Resume, within one strategy and across them.
ADAM=(--optimizer adam --lr 0.02)
run 3 120 train "${GPT[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 9 --shard-params --save "$WORK/p9.h5"
expect_rc 0 "sharded parameters, steps 0-9"
run 3 120 train "${GPT[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 20 --shard-params --resume "$WORK/p9.h5" --save "$WORK/p20.h5"
expect_rc 0 "sharded parameters, steps 9-20"
grep -q "resuming from" "$OUT" || fail "the run did not resume"
train 3 straight "${GPT[@]}" "${ADAM[@]}" --shard-params
same_state "$WORK/p20.h5" "$WORK/straight.h5" || fail "a resumed --shard-params run left the stream"
# Across rank counts and strategies on the MLP (the GPT's key bias has an
# exactly zero gradient, whose rounding noise Adam turns into steps of lr).
MLP_ADAM=("${MLP[@]}" --batch-size 26 "${ADAM[@]}")
train 3 straight "${MLP_ADAM[@]}" --shard-params
run 3 120 train "${MLP_ADAM[@]}" "${COMMON[@]}" --steps 9 --shard-params --save "$WORK/m9.h5"
expect_rc 0 "MLP, sharded parameters on 3 ranks, steps 0-9"
run 2 120 train "${MLP_ADAM[@]}" "${COMMON[@]}" --steps 14 --resume "$WORK/m9.h5" --save "$WORK/m14.h5"
expect_rc 0 "MLP, plain on 2 ranks, steps 9-14"
run 4 120 train "${MLP_ADAM[@]}" "${COMMON[@]}" --steps 20 --shard-params --resume "$WORK/m14.h5" --save "$WORK/m20.h5"
expect_rc 0 "MLP, sharded parameters on 4 ranks, steps 14-20"
close_state "$WORK/m20.h5" "$WORK/straight.h5" 1e-4 || fail "3 -> 2 -> 4 ranks across strategies left the stream"
echo "ok: resume"

# Memory: the backend's measured buffers on 4 ranks, sharded against plain.
BIG=(--data "$WORK/tok.h5" --batch-size 8 --val-set ""
     --model "embed:96,pos,8*(res(ln,attn:4:causal),res(ln,dense:384,gelu:tanh,dense:96)),ln,dense:40")
train 4 plain "${BIG[@]}" "${ADAMW[@]}"
train 4 sharded "${BIG[@]}" "${ADAMW[@]}" --shard-params
"$PYTHON" - "$WORK/plain.jsonl" "$WORK/sharded.jsonl" <<'PY'
import json, sys
def memory(p): return [json.loads(l) for l in open(p) if '"summary"' in l][-1]["memory_mib"]
plain, sharded = memory(sys.argv[1]), memory(sys.argv[2])
ratio = sharded["peak_buffers"] / plain["peak_buffers"]
print(f"peak of the backend's buffers: {plain['peak_buffers']:.2f} -> {sharded['peak_buffers']:.2f} MiB "
      f"({ratio:.3f}); host {plain['peak_host']:.0f} -> {sharded['peak_host']:.0f} MiB")
assert ratio <= 0.45, (plain, sharded)
assert abs(sharded["params"] * 4 - plain["params"]) < 0.01, (plain, sharded)
PY

# Resume reads what lives in slices tensor by tensor as rank 0 sends it: a
# resumed run's host peak is the fresh run's plus at most a tensor, not
# plus the whole state (parameters and AdamW's moments, 81.6 MiB here).
WIDE=(--data "$WORK/tok.h5" --batch-size 8 --val-set "" "${ADAMW[@]}" --seed 4 --device cpu --threads 1
      --model "embed:192,pos,16*(res(ln,attn:4:causal),res(ln,dense:768,gelu:tanh,dense:192)),ln,dense:40")
run 4 120 train "${WIDE[@]}" --steps 4 --shard-params --save "$WORK/w4.h5" --metrics "$WORK/fresh.jsonl"
expect_rc 0 "wide GPT, steps 0-4"
run 4 120 train "${WIDE[@]}" --steps 5 --shard-params --resume "$WORK/w4.h5" --metrics "$WORK/resumed.jsonl"
expect_rc 0 "wide GPT resumed, steps 4-5"
"$PYTHON" - "$WORK/fresh.jsonl" "$WORK/resumed.jsonl" <<'PY'
import json, sys
def memory(p): return [json.loads(l) for l in open(p) if '"summary"' in l][-1]["memory_mib"]
fresh, resumed = memory(sys.argv[1]), memory(sys.argv[2])
whole = 4 * resumed["params"] * 3  # parameters, m and v of all 4 slices
grew = resumed["peak_host"] - fresh["peak_host"]
print(f"host peak: fresh {fresh['peak_host']:.1f} MiB, resumed {resumed['peak_host']:.1f} MiB "
      f"(+{grew:.1f}; the whole state is {whole:.1f} MiB)")
assert grew < 0.25 * whole, (fresh, resumed)
PY
# A damaged tensor in the middle of the state: every rank exits 4 naming
# the file and the tensor, none is left waiting for its slice.
"$PYTHON" - "$WORK/w4.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    names = []
    f["optimizer/m"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    d = f["optimizer/m/" + names[len(names) // 2]]
    v = d[...]
    v.flat[1] = float("nan")
    d[...] = v
PY
run 3 120 train "${WIDE[@]}" --steps 5 --shard-params --resume "$WORK/w4.h5"
expect_rc 4 "resume from a damaged tensor"
expect_one_error "w4.h5"
grep -q "NaN at index" "$ERR" || fail "the error does not name the NaN: $(cat "$ERR")"
echo "ok: resume streams the slices"

echo "shard-params: all checks passed"
