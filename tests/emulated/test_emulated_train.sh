# Tests: `dptrain train --device cuda` end to end on 1 and 2 ranks, on the
# CUDA host emulation (emulated_dptrain: the real backend and NCCL
# communicator, deferred streams, NCCL over MPI), against the CPU backend:
#  - an MLP and a CNN (convolution, global batch norm, pooling, dropout,
#    augmentation) end with the CPU run's weights, on 1 and 2 ranks. On 2
#    ranks this takes the input pipeline's uploads, the bucketed all-reduce
#    and bn's all-reduced statistics in their real order, with every stream
#    as late as its events allow: a missing wait leaves a rank with data of
#    the wrong step, or unreduced gradients, and the towers far apart;
#  - --input-readers all trains bitwise as rank 0 reading for everyone;
#  - with --precision tf32 and bf16 the losses of an MLP and a CNN stay
#    within the GPU check's bounds of the fp32 CPU run's;
#  - a run checkpointed half-way and resumed ends bitwise where the
#    straight one does (the checkpoint reads and writes device memory), also
#    resumed with --shard-optimizer (NCCL's ncclReduceScatter/ncclAllGather
#    over near-equal pieces, grouped reduces and broadcasts otherwise);
#    sharded with --accumulate 2 it ends with the CPU run's weights.
# Tolerance 1e-4, as test_rank_invariance.sh: fp32 rounding in a different
# summation order is about 1e-6 relative over these few steps (measured up
# to 3e-6); a lost reduction or a wrong step's data is over 1e-2.
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
: "${EMULATED_DPTRAIN:?run through ctest}"
CPU_DPTRAIN=$DPTRAIN

synthetic "$WORK/d.h5" --n 384 --val-n 64 --shape 8,8 --classes 4 --dtype uint8 --seed 3
mlp=(train --data "$WORK/d.h5" --model dense:32,relu,dense:4 --batch-size 48 --optimizer adam
     --lr 0.01 --seed 5 --threads 1 --log-every 1 --val-set "")
# bn after relu: a conv bias feeding bn has a zero gradient, so its value
# would be rounding noise of any size relative to itself.
cnn=(train --data "$WORK/d.h5" --model conv:4:3,relu,bn,maxpool:2,dense:16,relu,dropout:0.25,dense:4
     --augment crop:1,flip --batch-size 32 --optimizer sgd --momentum 0.9 --lr 0.05 --seed 6
     --threads 1 --log-every 4 --val-set "")
cnn2=(train --data "$WORK/d.h5" --model conv:3:3,relu,conv:4:3,relu,maxpool:2,gap,dense:4
      --batch-size 32 --optimizer sgd --lr 0.05 --seed 7 --threads 1 --log-every 1 --val-set "")

# on DEVICE NP NAME ARGS...: trains with that device's binary, saving NAME.h5.
on() {
  local device=$1 np=$2 name=$3
  shift 3
  if [[ $device == cuda ]]; then DPTRAIN=$EMULATED_DPTRAIN; else DPTRAIN=$CPU_DPTRAIN; fi
  run "$np" 240 "$@" --device "$device" --save "$WORK/$name.h5"
  expect_rc 0 "$name ($device on $np rank(s))"
}

# Both schedules of the emulated streams (streams.hpp): every stream as
# late as its events allow, and every stream at once but collectives'
# results late.
for schedule in lazy eager; do
  export DPTRAIN_EMULATED_STREAMS=$schedule
  for np in 1 2; do
    on cpu "$np" "mlp-cpu-$np" "${mlp[@]}" --steps 16
    on cuda "$np" "mlp-cuda-$np" "${mlp[@]}" --steps 16
    grep -q "device cuda" "$OUT" || fail "the emulated run did not report device cuda"
    compare_models "$WORK/mlp-cuda-$np.h5" "$WORK/mlp-cpu-$np.h5" 1e-4 ||
      fail "MLP on $np rank(s), $schedule streams: cuda vs cpu"
    echo "ok: MLP, $np rank(s), $schedule streams: emulated cuda = cpu"
  done
  # Every rank reading its own rows gives the same global batches, bitwise.
  on cuda 2 mlp-cuda-all "${mlp[@]}" --steps 16 --input-readers all
  compare_models "$WORK/mlp-cuda-all.h5" "$WORK/mlp-cuda-2.h5" exact ||
    fail "--input-readers all differs from rank0 ($schedule streams)"
  echo "ok: MLP, 2 ranks, $schedule streams: --input-readers all = rank0, bitwise"

  # TF32 and bf16: the loss of each step within the GPU check's bounds of
  # the fp32 CPU run's (1e-2, 3e-2), and more than 1e-5 off it (fp32 is
  # about 1e-6 off), so the precision did reach the GEMMs and convolutions.
  # The CNN's second convolution has its weights at byte 120 of the
  # parameters, where tensor-core kernels do not read them (conv_plan.cpp).
  for model in mlp cnn2; do
    if [[ $model == mlp ]]; then args=("${mlp[@]}" --steps 16); else args=("${cnn2[@]}" --steps 8); fi
    on cpu 2 "$model-cpu-metrics" "${args[@]}" --metrics "$WORK/cpu.jsonl"
    for spec in tf32:1e-2 bf16:3e-2; do
      p=${spec%%:*}
      on cuda 2 "$model-$p" "${args[@]}" --precision "$p" --metrics "$WORK/$p.jsonl"
      "$PYTHON" - "$WORK/$p.jsonl" "$WORK/cpu.jsonl" "${spec#*:}" <<'PY' || fail "$model $p, $schedule streams"
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"event":"train"' in l]
got, ref, bound = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(got) == len(ref) > 0, (len(got), len(ref))
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
assert 1e-5 < worst <= bound, f"worst relative loss difference {worst:.3g}, expected in (1e-5, {bound}]"
# The device holds at least the parameters, their gradients and Adam's
# moments (4 arenas) in its buffers; the CPU reports no device of its own.
def memory(path):
    return [json.loads(l) for l in open(path) if '"summary"' in l][0]["memory_mib"]
gpu, cpu = memory(sys.argv[1]), memory(sys.argv[2])
assert cpu["peak_device"] == 0 and gpu["params"] == cpu["params"] > 0, (gpu, cpu)
assert gpu["peak_device"] >= 4 * gpu["params"] - 1 / 1024 and gpu["peak_host"] > 0, gpu
PY
      echo "ok: $model $p, 2 ranks, $schedule streams: losses within ${spec#*:} of fp32 cpu"
    done
  done

  on cpu 2 cnn-cpu "${cnn[@]}" --steps 8
  on cuda 2 cnn-cuda "${cnn[@]}" --steps 8
  compare_models "$WORK/cnn-cuda.h5" "$WORK/cnn-cpu.h5" 1e-4 ||
    fail "CNN on 2 ranks, $schedule streams: cuda vs cpu"
  echo "ok: CNN, 2 ranks, $schedule streams: emulated cuda = cpu"

  on cuda 2 straight "${mlp[@]}" --steps 16
  on cuda 2 first-half "${mlp[@]}" --steps 16 --checkpoint-dir "$WORK/ck-$schedule" \
    --checkpoint-every 8 --keep-checkpoints 0
  [[ -f $WORK/ck-$schedule/ckpt-000000008.h5 ]] || fail "no checkpoint at step 8"
  on cuda 2 resumed "${mlp[@]}" --steps 16 --resume "$WORK/ck-$schedule/ckpt-000000008.h5"
  grep -q "resuming from .*ckpt-000000008.h5" "$OUT" || fail "did not resume from step 8"
  compare_models "$WORK/resumed.h5" "$WORK/straight.h5" exact ||
    fail "resumed emulated cuda run differs ($schedule streams)"
  echo "ok: emulated cuda, 2 ranks, $schedule streams: checkpoint at 8 + resume = straight"

  # --shard-optimizer (ncclReduceScatter/ncclAllGather or grouped reduces
  # and broadcasts, as the pieces of each call are cut) resumed from the
  # unsharded checkpoint: on 2 ranks every sum is one addition, so bitwise
  # the straight run; with --accumulate 2 too, the CPU run within rounding.
  on cuda 2 sharded "${mlp[@]}" --steps 16 --shard-optimizer --resume "$WORK/ck-$schedule/ckpt-000000008.h5"
  grep -q "slice 1/2" "$OUT" || fail "no sharded memory line"
  same_state "$WORK/sharded.h5" "$WORK/straight.h5" ||
    fail "sharded emulated cuda run differs from the unsharded one ($schedule streams)"
  on cuda 2 sharded-k2 "${mlp[@]}" --steps 16 --shard-optimizer --accumulate 2
  compare_models "$WORK/sharded-k2.h5" "$WORK/mlp-cpu-2.h5" 1e-4 ||
    fail "sharded, --accumulate 2 on emulated cuda vs cpu ($schedule streams)"
  echo "ok: emulated cuda, 2 ranks, $schedule streams: --shard-optimizer = unsharded, with --accumulate 2 = cpu"
done
