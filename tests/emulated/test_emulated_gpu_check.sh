# Tests: tools/gpu-check.sh run whole, every row of its table, on GPUS (1
# or 2) emulated GPUs: the emulated programs (dptrain, gpu_tests,
# dptrain_bench, dptrain_nccl_rate, dptrain_conv_layout on the CUDA host
# emulation) laid out as an unpacked bundle, the machine's own Open MPI,
# and a stand-in nvidia-smi that reports GPUS GPUs. Without a GPU nothing
# else runs the check's GPU branch: its test rows on 1 and (with 2 GPUs) 2
# ranks, the training runs on 1 and 2 GPUs, the accuracy rows against the CPU reference (TF32 and bf16
# rounding are emulated, so their bounds are met or not as on a GPU), and
# the speed rows of every tool. The check must exit 0 with every row
# present and none failed; with 1 GPU the 2-GPU rows say skipped. The speed figures mean nothing here (emulated
# time; quick sizes: SPEED_REPEATS, SPEED_ROWS, ALLREDUCE_MIB; the PyTorch
# rows on the CPU, where torch is installed); what is checked is that each
# tool runs, that its rows reach the table as numbers, and that the table
# holds what docs/gpu.md says it does.
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
: "${EMULATED_BIN:?run through ctest}"
GPUS=${GPUS:-2}
[[ $GPUS == 1 || $GPUS == 2 ]] || fail "GPUS=$GPUS: 1 or 2"

tree=$WORK/bundle
mkdir -p "$tree/bin" "$tree/data" "$WORK/driver"
for pair in dptrain:emulated_dptrain gpu_tests:emulated_gpu_tests dptrain_bench:emulated_dptrain_bench \
  dptrain_nccl_rate:emulated_nccl_rate dptrain_conv_layout:emulated_conv_layout; do
  ln "$EMULATED_BIN/${pair#*:}" "$tree/bin/${pair%%:*}" 2>/dev/null ||
    cp "$EMULATED_BIN/${pair#*:}" "$tree/bin/${pair%%:*}"
done
printf 'glibc=%s\ncommit=emulated\n' "$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)" >"$tree/MANIFEST"
synthetic "$tree/data/synthetic.h5" --n 2048 --val-n 256 --shape 28,28 --classes 10 --dtype uint8 --seed 1
cat >"$WORK/driver/nvidia-smi" <<EOF
#!/bin/sh
# Stands in for the driver's tool: $GPUS emulated GPU(s).
if [ "\$1" = -L ]; then
  for i in \$(seq 0 $((GPUS - 1))); do echo "GPU \$i: emulated GPU (UUID: GPU-emulated-\$i)"; done
else
  echo "emulated GPU (tests/emulated), none, 0 MiB"
fi
EOF
chmod +x "$WORK/driver/nvidia-smi"
# The check's python3 is the first on PATH: the one with h5py (and torch,
# where installed), whose PyTorch side then runs on the CPU.
ln -s "$PYTHON" "$WORK/driver/python3"
torch=0
"$PYTHON" -c "import torch" 2>/dev/null && torch=1

# A subset of the GPU tests (all of them run in emulated_gpu): GEMM
# precision, MLP and CNN training, the cuDNN plans and one NCCL ordering
# test; on 2 ranks each rank has its own emulated GPU.
tests='CudaGemm.Fp32MatchesCpu:CudaGemm.Tf32WithinTf32Error:CudaGemm.Bf16WithinBf16Error'
tests+=':CudaTraining.*:CudaCnnTraining.ImagesAdamMatchesCpu:CudnnConv*:CudnnPool*'
tests+=':Nccl.OrderedWithComputeStream'
table=$WORK/check.txt
set +e
PATH=$WORK/driver:$PATH DPTRAIN_TORCH_DEVICE=cpu BUNDLE=$tree GTEST_FILTER=$tests STEPS=20 BUDGET_S=900 SPEED_REPEATS=2 \
  SPEED_ROWS=4 ALLREDUCE_MIB=1 timeout -k 5 1000 bash "$DPTRAIN_SOURCE_DIR/tools/gpu-check.sh" \
  >"$table" 2>"$WORK/check.err"
rc=$?
set -e
cat "$table"
[[ $rc -eq 0 ]] || { tail -40 "$WORK/check.err" >&2; fail "gpu-check exit $rc, want 0"; }

rows() { grep -c "^| $1 |" "$table" || true; }  # rows of a section
has() { grep -qF -- "$1" "$table" || fail "no table row with: $1"; }
bad=$(grep -E '\| (FAILED|TIMED OUT|OVER|NOT FOUND|not run|not built)' "$table" || true)
[[ -z $bad ]] || fail "rows that did not pass: $bad"

has "| setup | GPUs | $GPUS | emulated GPU"
has "| setup | Open MPI | the machine's |"
has "| setup | smoke launch (orterun -n 1 true) | ok |"
n=$("$EMULATED_BIN/emulated_gpu_tests" --gtest_filter="$tests" --gtest_list_tests | grep -c '^  ')
ranks=("1 rank")
((GPUS == 2)) && ranks+=("2 ranks")
for r in "${ranks[@]}"; do
  got=$(grep -c "^| tests ($r) | .* | passed |" "$table" || true)
  [[ $got -eq $n ]] || fail "$got of the $n GPU tests passed on $r"
done
for p in fp32 tf32 bf16; do
  has "| training | 1 GPU $p, 20 steps | ok | loss "
  has "| accuracy | $p vs CPU, loss of each of 20 steps | ok | largest difference"
done
if ((GPUS == 2)); then
  has "| training | 2 GPUs fp32, 20 steps | ok | loss "
else
  has "| tests (2 ranks) | all GPU tests on 2 ranks | skipped | needs 2 GPUs |"
  has "| training | 2 GPUs fp32 | skipped | needs 2 GPUs |"
  has "| speed | all-reduce bus bandwidth vs NCCL | skipped | needs 2+ GPUs (dptrain_nccl_rate on 1 rank: ok) |"
fi
has "| accuracy | CPU reference (fp32, 20 steps) | ok |"

# Speed: each tool's rows are in the table, each with a number for a result.
number='[0-9][0-9.e+-]*'
for p in fp32 tf32 bf16; do
  grep -qE "^\| speed \| step vs bare GEMMs \(1 GPU, $p\) \(gemm-$p\) \| $number \|" "$table" ||
    fail "no gemm row for $p"
  grep -qE "^\| speed \| CNN step vs its library passes \(1 GPU, $p\) \(cnn-$p\) \| $number \|" "$table" ||
    fail "no CNN row for $p"
done
for p in fp32 tf32 bf16; do
  grep -qE "^\| speed \| $p data wait share of the step \| $number \|" "$table" || fail "no $p data wait row"
  if ((torch)); then
    grep -qE "^\| speed \| $p step: dptrain vs PyTorch eager \| $number \| .* on cpu\) \|" "$table" ||
      fail "no $p PyTorch step row"
    grep -qE "^\| speed \| $p fwd\+bwd vs bare GEMMs \(torch.matmul\) \| $number \|" "$table" ||
      fail "no $p PyTorch GEMM row"
  fi
done
((torch)) || echo "no torch for $PYTHON: the PyTorch rows were not checked"
if ((GPUS == 2)); then
  grep -qE "^\| speed \| all-reduce 1 MiB bus bandwidth vs NCCL \(2 GPUs\) \| $number \|" "$table" ||
    fail "no all-reduce row"
fi
layout=$(grep -cE "^\| speed \| conv .* NCHW vs NHWC.* \| $number \|" "$table" || true)
[[ $layout -eq 18 ]] ||
  fail "$layout channels-last rows, want 18 ((2 layers x (3 passes + 1 step) + the stack) x 2 precisions)"
grep -qE "^\| speed \| conv stack of 2 layers channels-last throughout: .*\(bf16\) \| $number \| .* ms converting; " "$table" ||
  fail "no channels-last row for the whole conv stack in bf16"
echo "PASS: gpu-check on $GPUS emulated GPU(s): exit 0, $(wc -l <"$table") lines, $n tests on ${ranks[*]}, $(rows speed) speed rows"
