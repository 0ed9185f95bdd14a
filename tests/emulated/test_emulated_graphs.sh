# Tests: `dptrain train --device cuda --cuda-graphs on` on the CUDA host
# emulation (emulated_dptrain): on one rank, a CNN (convolution, bn over the
# batch, pooling, dropout, augmentation) and an MLP, in fp32 and bf16, over
# epochs whose last batch is shorter, end bitwise where the same run without
# graphs ends, and say how many steps were replayed (each shape and shard
# buffer recorded at its second step). Where graphs do not apply (2 ranks,
# --accumulate 2) a note says so once and the run is bitwise the run without
# the option. Evaluation between steps, clipping, a schedule and a resume from
# a checkpoint leave the bits as they are. (On the CPU the option is a usage
# error: tests/cli/test_bad_options.sh.)
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
: "${EMULATED_DPTRAIN:?run through ctest}"

# 384 rows in batches of 40: 9 of 40 and one of 24 an epoch.
synthetic "$WORK/d.h5" --n 384 --val-n 64 --shape 8,8 --classes 4 --dtype uint8 --seed 3
mlp=(train --data "$WORK/d.h5" --model dense:32,relu,dense:4 --batch-size 40 --optimizer adam
     --lr 0.01 --seed 5 --threads 1 --log-every 5 --val-set "")
cnn=(train --data "$WORK/d.h5" --model conv:4:3,relu,bn,maxpool:2,dense:16,relu,dropout:0.25,dense:4
     --augment crop:1,flip --batch-size 40 --optimizer sgd --momentum 0.9 --lr 0.05 --seed 6
     --threads 1 --log-every 5 --val-set "")

# cuda NP NAME ARGS...: trains on the emulated GPU, saving NAME.h5.
cuda() {
  local np=$1 name=$2
  shift 2
  DPTRAIN=$EMULATED_DPTRAIN
  run "$np" 300 "$@" --device cuda --save "$WORK/$name.h5"
  expect_rc 0 "$name (cuda on $np rank(s))"
}

for model in cnn mlp; do
  if [[ $model == cnn ]]; then args=("${cnn[@]}"); else args=("${mlp[@]}"); fi
  for p in fp32 bf16; do
    cuda 1 "$model-$p-off" "${args[@]}" --steps 22 --precision "$p"
    grep -q "cuda-graphs" "$OUT" "$ERR" && fail "$model $p: --cuda-graphs off spoke of graphs"
    cuda 1 "$model-$p-on" "${args[@]}" --steps 22 --precision "$p" --cuda-graphs on
    # Steps 0..21, epochs of 10 steps: the input pipeline alternates two
    # shard buffers (even steps, odd steps), and the short batch (steps 9
    # and 19) lands in the odd one: 3 keys, each run as usual at its first
    # step and replayed at every later one.
    grep -q "note: --cuda-graphs" "$ERR" && fail "$model $p: $(grep 'note: --cuda-graphs' "$ERR")"
    grep -q "cuda-graphs on: 3 graphs recorded, 19 of 22 steps replayed" "$ERR" ||
      fail "$model $p: $(grep 'graphs recorded' "$ERR" || echo 'no graphs line')"
    same_state "$WORK/$model-$p-on.h5" "$WORK/$model-$p-off.h5" ||
      fail "$model $p: --cuda-graphs on differs from off"
    echo "ok: $model $p, 1 rank: --cuda-graphs on = off, bitwise, 19 of 22 steps replayed"
  done
done

# With evaluation between steps, clipping and a schedule, and resumed from
# a periodic checkpoint: graphs are recorded anew after the resume, and the
# run ends bitwise where the run without graphs, resumed alike, ends.
cnn_eval=("${cnn[@]:0:${#cnn[@]}-2}")  # without --val-set ""
more=(--val-set test --eval-every 7 --clip-grad-norm 1 --lr-schedule cosine --warmup-steps 3
      --steps 22 --precision bf16 --checkpoint-every 6 --keep-checkpoints 0)
for g in off on; do
  cuda 1 "cnn-ck-$g" "${cnn_eval[@]}" "${more[@]}" --cuda-graphs "$g" --checkpoint-dir "$WORK/ck-$g"
  cuda 1 "cnn-resumed-$g" "${cnn_eval[@]}" "${more[@]}" --cuda-graphs "$g" --checkpoint-dir "$WORK/ck2-$g" \
    --resume "$WORK/ck-$g/ckpt-000000012.h5"
done
grep -q "cuda-graphs on: 2 graphs recorded, 7 of 10 steps replayed" "$ERR" ||
  fail "resumed: $(grep 'graphs recorded' "$ERR" || echo 'no graphs line')"
for name in cnn-ck cnn-resumed; do
  same_state "$WORK/$name-on.h5" "$WORK/$name-off.h5" ||
    fail "$name: --cuda-graphs on differs from off"
done
same_state "$WORK/cnn-resumed-on.h5" "$WORK/cnn-ck-off.h5" ||
  fail "resumed with graphs differs from the whole run"
echo "ok: with evaluation, clipping, a schedule and a resume: on = off, bitwise"

# Where graphs do not apply: said once, and the run is the usual one.
cuda 2 mlp-2-off "${mlp[@]}" --steps 12
cuda 2 mlp-2-on "${mlp[@]}" --steps 12 --cuda-graphs on
[[ $(grep -c "note: --cuda-graphs on: a graph holds one rank's step, and this job has 2 ranks" "$ERR") == 1 ]] ||
  fail "2 ranks: no single note"
same_state "$WORK/mlp-2-on.h5" "$WORK/mlp-2-off.h5" || fail "2 ranks: on differs from off"
cuda 1 mlp-k2 "${mlp[@]}" --steps 6 --accumulate 2 --cuda-graphs on
grep -q "note: --cuda-graphs on: --accumulate runs a step as micro-batches" "$ERR" ||
  fail "--accumulate 2: no note"
echo "ok: 2 ranks and --accumulate 2: said once, runs as usual"

