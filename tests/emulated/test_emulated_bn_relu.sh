# Tests: a bn and the relu after it run in one pass each way
# (Layer::absorbs_next), end to end through `dptrain train`: a model with
# "bn,relu" ends bitwise where the same model with "bn,dropout:0,relu" ends
# (dropout:0 is the identity forward and backward, and keeps the two
# layers apart, so they run as layers of their own). The whole checkpoint
# (weights, bn's running statistics, optimizer state: same_state) and every
# metric line: on the CPU backend on 1 rank and on 3
# (bn over the global batch, uneven shards), with bn:local, and on the
# emulated GPU in fp32 and bf16. Convolutional (bn per channel) and flat
# (per feature) models, and residual blocks (the pair first in a block,
# last in a block, with a projection shortcut; --recompute blocks too);
# epochs with a short last batch and evaluation.
# ModelPlan.ABnWithTheReluAfterItKeepsNoOutputOfItsOwn (unit test) shows
# that the relu is absorbed; this shows what it computes.
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
: "${EMULATED_DPTRAIN:?run through ctest}"
CPU_DPTRAIN=$DPTRAIN

# 300 rows in batches of 32: 9 of 32 and one of 12 an epoch.
synthetic "$WORK/img.h5" --n 300 --val-n 50 --shape 1,8,8 --classes 4 --dtype uint8 --seed 5
synthetic "$WORK/flat.h5" --n 300 --val-n 50 --shape 7 --classes 3 --dtype float32 --seed 6
conv=conv:4:3,BN,RELU,maxpool:2,conv:6:3,BN,RELU,flatten,dense:5,relu,dense:4
flat=dense:12,BN,RELU,dense:3
resnet="conv:4:3:1:1,BN,RELU,res(conv:4:3:1:1,BN,RELU,conv:4:3:1:1,bn),relu,res(BN,RELU,conv:4:3:1:1)"
resnet+=",res(conv:6:3:2:1,BN,RELU),avgpool:2,flatten,dense:4"

# train NAME BINARY NP DATA SPEC ARGS...: trains SPEC with bn,relu adjacent
# (NAME-one.h5) and apart (NAME-two.h5) and compares them bit for bit.
train() {
  local name=$1 binary=$2 np=$3 data=$4 spec=$5
  shift 5
  local bn=bn
  [[ $name == *local* ]] && bn=bn:local
  DPTRAIN=$binary
  for how in one two; do
    local relu=relu
    [[ $how == two ]] && relu=dropout:0,relu
    local model=${spec//BN/$bn}
    run "$np" 300 train --data "$WORK/$data.h5" --model "${model//RELU/$relu}" --batch-size 32 \
      --steps 23 --optimizer adam --lr 0.01 --seed 7 --threads 1 --log-every 4 --eval-every 10 \
      --save "$WORK/$name-$how.h5" "$@"
    expect_rc 0 "$name ($how pass)"
    # The metric lines without their timings.
    grep -E "^(step|eval|epoch)" "$OUT" | sed -E 's/ [0-9.]+ (ms|s|samples\/s)\b.*//' \
      >"$WORK/$name-$how.log"
  done
  same_state "$WORK/$name-one.h5" "$WORK/$name-two.h5" ||
    fail "$name: bn,relu in one pass differs from the two layers"
  [[ -s $WORK/$name-one.log ]] || fail "$name: no metric lines in $(head -5 "$OUT")"
  cmp -s "$WORK/$name-one.log" "$WORK/$name-two.log" ||
    fail "$name: the metric lines differ: $(diff "$WORK/$name-one.log" "$WORK/$name-two.log" | head -4)"
  echo "ok: $name: bn,relu in one pass = the two layers, bitwise"
}

train conv-cpu "$CPU_DPTRAIN" 1 img "$conv" --device cpu
train conv-cpu-3 "$CPU_DPTRAIN" 3 img "$conv" --device cpu
train flat-cpu-3 "$CPU_DPTRAIN" 3 flat "$flat" --device cpu
train conv-cpu-local-3 "$CPU_DPTRAIN" 3 img "$conv" --device cpu
train resnet-cpu-3 "$CPU_DPTRAIN" 3 img "$resnet" --device cpu
train resnet-cpu-recompute "$CPU_DPTRAIN" 1 img "$resnet" --device cpu --recompute blocks
for p in fp32 bf16; do
  train "conv-cuda-$p" "$EMULATED_DPTRAIN" 1 img "$conv" --device cuda --precision "$p"
  train "flat-cuda-$p" "$EMULATED_DPTRAIN" 1 flat "$flat" --device cuda --precision "$p"
  train "resnet-cuda-$p" "$EMULATED_DPTRAIN" 1 img "$resnet" --device cuda --precision "$p"
done
train conv-cuda-2 "$EMULATED_DPTRAIN" 2 img "$conv" --device cuda
