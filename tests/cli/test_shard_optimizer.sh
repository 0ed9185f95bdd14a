# --shard-optimizer (ZeRO stage 1) and --accumulate K against the plain run:
# - sharded and unsharded runs of 30 steps end with the same weights AND the
#   same optimizer state in the checkpoint (the sharded one gathered into the
#   unsharded layout) on 1 to 4 ranks, for SGD with Nesterov momentum, Adam
#   and AdamW with clipping, on an MLP arena of 173 floats (prime: no rank
#   count divides it), a CNN and a GPT. On the CPU both sum every gradient
#   element in rank order (src/comm/mpi_comm.cpp) and the updates are
#   elementwise, so they agree bit for bit; only clipping's norm is summed in
#   another order (slices, then ranks), a double whose float rounding may
#   differ in the last bit: 1e-6 of a tensor's scale there.
# - resume: sharded on 3 ranks -> unsharded on 2 -> sharded on 4 continues
#   the straight run within the rounding of other rank counts (the bound of
#   test_rank_invariance.sh), and a sharded run resumed on the same ranks ends
#   bit for bit where the straight one does;
# - --accumulate 4 equals --accumulate 1 within rounding (sums of 4 partial
#   gradients, then ranks: 1e-5 of a tensor's scale after 30 Adam steps), with
#   dropout too (its draws follow the global row), also when a shard has
#   fewer rows than K; with bn it trains;
# - the start-up summary's optimizer state per rank falls as 1/P.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 250 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 9
synthetic "$WORK/img.h5" --n 120 --val-n 20 --shape 1,8,8 --classes 3 --dtype float32 --seed 5
random_tokens "$WORK/tok.h5" 40 9 90 14 3
MLP=(--data "$WORK/d.h5" --model dense:17,tanh,dense:3 --batch-size 26)
CNN=(--data "$WORK/img.h5" --model "conv:4:3,relu,maxpool:2,dense:3" --batch-size 22)
GPT=(--data "$WORK/tok.h5" --model "embed:12,pos,res(ln,attn:2:causal),res(ln,dense:24,gelu:tanh,dense:12),ln,dense:40" --batch-size 14)
COMMON=(--seed 4 --device cpu --threads 1 --log-every 10 --val-set "")

# train NP NAME ARGS...: a run on NP ranks that must succeed, saved as NAME.h5
train() {
  local np=$1 name=$2
  shift 2
  run "$np" 120 train "$@" "${COMMON[@]}" --steps 30 --save "$WORK/$name.h5"
  expect_rc 0 "$name"
}

# sharded vs unsharded: NP TOL ARGS...
both() {
  local np=$1 tol=$2
  shift 2
  train "$np" plain "$@"
  train "$np" sharded "$@" --shard-optimizer
  grep -q "slice 1/$np" "$OUT" || [[ $np -eq 1 ]] || fail "no sharded memory line on $np ranks"
  close_state "$WORK/sharded.h5" "$WORK/plain.h5" "$tol" || fail "sharded differs on $np ranks: $*"
}
SGD=(--optimizer sgd --momentum 0.9 --nesterov --lr 0.05)
ADAMW=(--optimizer adamw --lr 0.01 --weight-decay 0.1 --weight-decay-params matrices --clip-grad-norm 0.3)
for np in 1 2 3 4; do both $np 0 "${MLP[@]}" "${SGD[@]}"; done
both 4 1e-6 "${MLP[@]}" "${ADAMW[@]}"
both 3 0 "${CNN[@]}" --optimizer adam --lr 0.01
both 2 1e-6 "${GPT[@]}" "${ADAMW[@]}"

# Resume across configurations. The straight run: sharded on 3 ranks.
ADAM=(--optimizer adam --lr 0.02)
train 3 straight "${MLP[@]}" "${ADAM[@]}"
run 3 120 train "${MLP[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 10 --shard-optimizer --save "$WORK/c10.h5"
expect_rc 0 "sharded on 3 ranks, steps 0-10"
run 2 120 train "${MLP[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 20 --resume "$WORK/c10.h5" --save "$WORK/c20.h5"
expect_rc 0 "unsharded on 2 ranks, steps 10-20"
run 4 120 train "${MLP[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 30 --shard-optimizer --resume "$WORK/c20.h5" --save "$WORK/c30.h5"
expect_rc 0 "sharded on 4 ranks, steps 20-30"
grep -q "resuming from" "$OUT" || fail "the 4-rank run did not resume"
close_state "$WORK/c30.h5" "$WORK/straight.h5" 1e-4 || fail "3 -> 2 -> 4 ranks left the stream"
run 3 120 train "${MLP[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 15 --shard-optimizer --save "$WORK/s15.h5"
expect_rc 0 "sharded on 3 ranks, steps 0-15"
run 3 120 train "${MLP[@]}" "${ADAM[@]}" "${COMMON[@]}" --steps 30 --shard-optimizer --resume "$WORK/s15.h5" --save "$WORK/s30.h5"
expect_rc 0 "sharded on 3 ranks, steps 15-30"
train 3 straight_sharded "${MLP[@]}" "${ADAM[@]}" --shard-optimizer
close_state "$WORK/s30.h5" "$WORK/straight_sharded.h5" 0 || fail "sharded resume is not bitwise"

# --accumulate K: the same global-batch mean.
DROP=(--data "$WORK/d.h5" --model dense:17,tanh,dropout:0.3,dense:3 --batch-size 26)
for np in 1 3; do
  train $np k1 "${DROP[@]}" "${ADAM[@]}"
  train $np k4 "${DROP[@]}" "${ADAM[@]}" --accumulate 4
  grep -q "micro-batches of up to" "$OUT" || fail "no --accumulate line"
  close_state "$WORK/k4.h5" "$WORK/k1.h5" 1e-5 || fail "--accumulate 4 differs on $np ranks"
done
# Shards of 7 and 6 rows in 8 micro-batches (some empty), sharded too.
train 4 k8 "${MLP[@]}" "${ADAM[@]}" --accumulate 8 --shard-optimizer
train 4 k1 "${MLP[@]}" "${ADAM[@]}"
close_state "$WORK/k8.h5" "$WORK/k1.h5" 1e-5 || fail "--accumulate 8 on 4 ranks differs"
train 2 bn "${CNN[@]/conv:4:3,relu/conv:4:3,bn,relu}" "${ADAM[@]}" --accumulate 3 --shard-optimizer
grep -q "loss nan\|loss inf" "$OUT" && fail "bn with --accumulate: non-finite loss"

# Optimizer state per rank falls as 1/P (Adam on 2563 parameters).
state_bytes() {  # the optimizer state of the memory line, in bytes
  grep "memory per rank" "$OUT" | sed -E 's/.*optimizer state ([0-9.]+) (B|KiB|MiB).*/\1 \2/' |
    awk '{m = $2 == "KiB" ? 1024 : ($2 == "MiB" ? 1048576 : 1); printf "%.0f\n", $1 * m}'
}
declare -A state
for np in 1 2 4; do
  run $np 60 train --data "$WORK/d.h5" --model dense:256,tanh,dense:3 --batch-size 26 --steps 1 \
    --device cpu --threads 1 --val-set "" --shard-optimizer
  expect_rc 0 "memory on $np ranks"
  state[$np]=$(state_bytes)
done
for np in 2 4; do
  "$PYTHON" -c "import sys; r = ${state[1]} / ${state[$np]}; sys.exit(abs(r - $np) > 0.02 * $np)" ||
    fail "optimizer state on $np ranks: ${state[$np]} B, on 1: ${state[1]} B"
done

run 1 30 train "${MLP[@]}" --accumulate 0 --device cpu
expect_rc 2 "--accumulate 0"
expect_one_error "--accumulate"
echo PASS
