# Tests: tools/gpu-check.sh run whole, every row of its table, on GPUS (1
# or 2) emulated GPUs: the emulated programs (dptrain, gpu_tests,
# dptrain_bench, dptrain_gpt_bench, dptrain_nccl_rate, dptrain_conv_layout
# on the CUDA host emulation) laid out as an unpacked bundle with a
# synthetic set and a token set (this checkout's docs as bytes), the
# machine's own Open MPI, and a stand-in nvidia-smi that reports GPUS GPUs.
# Without a GPU nothing else runs the check's GPU branch: its test rows on
# 1 and (with 2 GPUs) 2 ranks, the training runs on 1 and 2 GPUs, the
# accuracy rows of the MLP and of the GPT job against the CPU reference
# (TF32 and bf16 rounding are emulated, so their bounds are met or not as
# on a GPU), and the speed rows of every tool (the GPT ones on a shrunken
# GPT-2 shape: GPT2_SHAPE, GPT2_BATCH; PEAK_TFLOPS stands in for the peak
# of a GPU the check knows, so the MFU rows are numbers). The check must exit 0 with every row
# present and none failed; with 1 GPU the 2-GPU rows say skipped. The speed figures mean nothing here (emulated
# time; quick sizes: SPEED_REPEATS, SPEED_ROWS, ALLREDUCE_MIB; the PyTorch
# rows on the CPU, where torch is installed); what is checked is that each
# tool runs, that its rows reach the table as numbers, and that the table
# holds what docs/gpu.md says it does; and that --out leaves the table and
# results.tgz, an archive of the whole folder with the same table in it.
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
: "${EMULATED_BIN:?run through ctest}"
GPUS=${GPUS:-2}
[[ $GPUS == 1 || $GPUS == 2 ]] || fail "GPUS=$GPUS: 1 or 2"

tree=$WORK/bundle
mkdir -p "$tree/bin" "$tree/data" "$WORK/driver"
for pair in dptrain:emulated_dptrain gpu_tests:emulated_gpu_tests dptrain_bench:emulated_dptrain_bench \
  dptrain_gpt_bench:emulated_dptrain_gpt_bench dptrain_nccl_rate:emulated_nccl_rate \
  dptrain_conv_layout:emulated_conv_layout; do
  ln "$EMULATED_BIN/${pair#*:}" "$tree/bin/${pair%%:*}" 2>/dev/null ||
    cp "$EMULATED_BIN/${pair#*:}" "$tree/bin/${pair%%:*}"
done
printf 'glibc=%s\ncommit=emulated\n' "$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)" >"$tree/MANIFEST"
synthetic "$tree/data/synthetic.h5" --n 2048 --val-n 256 --shape 28,28 --classes 10 --dtype uint8 --seed 1
# The GPT job's token set, as tools/gpu-bundle.sh makes it but T = 16.
"$PYTHON" "$DPTRAIN_SOURCE_DIR/tools/convert_text.py" "$DPTRAIN_SOURCE_DIR/docs" \
  --output "$tree/data/gpt_text.h5" --window 16 >/dev/null
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
# A stand-in Nsight Compute: it runs the program it is given (after its
# own options) and writes, as ncu --csv does, a details-page CSV of three
# launches of two kernels to --log-file.
cat >"$WORK/driver/ncu" <<'EOF'
#!/bin/bash
log=/dev/stdout
while [[ $1 == --* ]]; do
  case $1 in
    --csv) shift ;;
    --log-file) log=$2; shift 2 ;;
    *) shift 2 ;;
  esac
done
"$@" || exit
k='"void dptrain::cuda::(anonymous namespace)::fused_forward_kernel<__nv_bfloat16, 16, __nv_bfloat16>(const T3 *, dptrain::HeadShape, float, bool, float *, float *, __nv_bfloat16 *)"'
m='"Command line profiler metrics","gpu__time_duration.sum","nsecond"'
launch() { echo "\"$1\",\"1\",\"p\",\"h\",$2,\"1\",\"7\",\"(128, 1, 1)\",\"(4, 1, 1)\",\"0\",\"9.0\",$m,\"$3\""; }
{
  echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
  launch 0 "$k" 3,000
  launch 1 '"nvjet_standin"' 1,000
  launch 2 "$k" 4,000
} >"$log"
EOF
chmod +x "$WORK/driver/ncu"
# A stand-in compute-sanitizer: it runs the program it is given (after its
# own options, each with a value) and ends as the real one does.
cat >"$WORK/driver/compute-sanitizer" <<'EOF'
#!/bin/bash
tool=memcheck
while [[ $1 == --* ]]; do
  [[ $1 == --tool ]] && tool=$2
  shift 2
done
"$@"
rc=$?
if [[ $tool == racecheck ]]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else echo "========= ERROR SUMMARY: 0 errors"; fi
exit $rc
EOF
chmod +x "$WORK/driver/compute-sanitizer"
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
# The GPT job: one block of width 32 on batches of 8 x 16 tokens, 8 steps;
# the GPT-2 shape: 2 layers, 2 heads, width 32, T 16, vocab 64, batch 2;
# the attention rows at (N 1, H 2, T 20, hd 16) and (1, 1, 16, 32), the
# tf32 ones also at (1, 1, 16, 128).
gpt_steps=8
PATH=$WORK/driver:$PATH DPTRAIN_TORCH_DEVICE=cpu BUNDLE=$tree GTEST_FILTER=$tests STEPS=20 BUDGET_S=900 SPEED_REPEATS=2 \
  SPEED_ROWS=4 ALLREDUCE_MIB=1 GPT_STEPS=$gpt_steps GPT_BATCH=8 GPT2_SHAPE=2,2,32,16,64 GPT2_BATCH=2 PEAK_TFLOPS=1 \
  ATTENTION_SHAPES=1,2,20,16/1,1,16,32 ATTENTION_WIDE_SHAPE=1,1,16,128 SANITIZE_FILTER=CudaGemm.Fp32MatchesCpu \
  GPT_MODEL="embed:32,pos,res(ln,attn:2:causal),res(ln,dense:64,gelu:tanh,dense:32),ln,dense:256" \
  timeout -k 5 1000 bash "$DPTRAIN_SOURCE_DIR/tools/gpu-check.sh" --out "$WORK/out" >"$table" 2>"$WORK/check.err"
rc=$?
set -e
cat "$table"
[[ $rc -eq 0 ]] || { tail -40 "$WORK/check.err" >&2; fail "gpu-check exit $rc, want 0"; }

rows() { grep -c "^| $1 |" "$table" || true; }  # rows of a section
# --out: the table as printed, and all of the folder in results.tgz.
[[ -f $WORK/out/table.md && -f $WORK/out/results.tgz ]] || fail "no table.md and results.tgz in --out"
tar -tzf "$WORK/out/results.tgz" >"$WORK/archived.txt" || fail "results.tgz is no gzip'd tar"
for f in ./table.md ./rows.tsv ./logs/notes.txt ./logs/tests1.txt ./logs/gpt-layers.txt; do
  grep -qxF "$f" "$WORK/archived.txt" || fail "results.tgz lacks $f: $(tr '\n' ' ' <"$WORK/archived.txt")"
done
if grep -q results.tgz "$WORK/archived.txt"; then fail "results.tgz holds itself"; fi
tar -xzOf "$WORK/out/results.tgz" ./table.md >"$WORK/archived-table.md"
grep -q '^_finished: exit 0 after' "$WORK/archived-table.md" ||
  fail "the archived table is not the finished one: $(tail -1 "$WORK/archived-table.md"); notes: $(tail -3 "$WORK/out/logs/notes.txt")"
diff -q <(grep -vF '_finished:' "$WORK/archived-table.md") "$table" >/dev/null ||
  fail "the archived table differs from the printed one"
has() { grep -qF -- "$1" "$table" || fail "no table row with: $1"; }
bad=$(grep -E '\| (FAILED|TIMED OUT|OVER|NOT FOUND|not run|not built)' "$table" || true)
[[ -z $bad ]] || fail "rows that did not pass: $bad"
nameless=$(grep -E '^\| [a-z]+ \| ( |\()' "$table" || true)
[[ -z $nameless ]] || fail "rows without a name: $nameless"

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
# The GPT job: the CPU reference, and every GPU run's losses within bounds.
has "| gpt | CPU reference (fp32, $gpt_steps steps) | ok | loss "
for p in fp32 tf32 bf16; do
  has "| gpt | 1 GPU $p vs CPU, loss of each of $gpt_steps steps | ok | largest difference "
done
if ((GPUS == 2)); then
  has "| gpt | 2 GPUs fp32 vs CPU, loss of each of $gpt_steps steps | ok | largest difference "
else
  has "| gpt | 2 GPUs fp32 vs CPU, loss of each of $gpt_steps steps | skipped | needs 2 GPUs |"
fi

# Speed: each tool's rows are in the table, each with a number for a result.
number='[0-9][0-9.e+-]*'
for p in fp32 tf32 bf16; do
  grep -qE "^\| speed \| step vs bare GEMMs \(1 GPU, $p\) \(gemm-$p\) \| $number \|" "$table" ||
    fail "no gemm row for $p"
  grep -qE "^\| speed \| CNN step vs its library passes \(1 GPU, $p\) \(cnn-$p\) \| $number \|" "$table" ||
    fail "no CNN row for $p"
  grep -qE "^\| speed \| CNN forward\+backward: host queue time vs device time \(1 GPU, $p\) \(cnn-$p\) \| $number \|" \
    "$table" || fail "no CNN queue row for $p"
  # --cuda-graphs on: the same steps, replayed (the row's detail in the
  # tool's log says so; the table would say "NOT recorded").
  for tool in gemm cnn; do
    [[ $tool == gemm ]] && what="step vs bare GEMMs" || what="CNN step vs its library passes"
    grep -qE "^\| speed \| $what, --cuda-graphs on \(1 GPU, $p\) \($tool-$p\) \| $number \| [^|]*[0-9] \|$" \
      "$table" || fail "no $tool row with --cuda-graphs on for $p, or not recorded"
    grep -F "\"row\":\"$what, --cuda-graphs on (1 GPU, $p)\"" "$WORK/out/logs/$tool-$p.txt" |
      grep -q "replayed as a CUDA graph" || fail "the $tool-$p row with --cuda-graphs on was not replayed"
  done
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
# The GPT speed rows: MFU of dptrain (and of PyTorch), the step against its GEMMs.
gpt2="| speed | GPT-2 small shape (2 layers, 2 heads, width 32, T 16, vocab 64) bf16: "
mfu=$(grep -F "${gpt2}tokens/s and MFU (dptrain, batch 2) |" "$table" || true)
grep -qE "^\| speed \| .* \| $number \| [0-9]+ tokens/s, .* peak 1 TFLOPS \(PEAK_TFLOPS\) \|$" <<<"$mfu" ||
  fail "no GPT tokens/s and MFU row with an MFU: ${mfu:-none}"
grep -F "${gpt2}tokens/s and MFU (dptrain, --attention math, batch 2) |" "$table" |
  grep -qE "\| $number \| [0-9]+ tokens/s, " || fail "no GPT tokens/s row with --attention math"
grep -F "${gpt2}tokens/s and MFU (dptrain, --recompute blocks, batch 2) |" "$table" |
  grep -qE "\| $number \| [0-9]+ tokens/s, .*device buffers" || fail "no GPT tokens/s row with --recompute blocks"
grep -F "${gpt2}tokens/s and MFU (dptrain, --shard-params, batch 2) |" "$table" |
  grep -qE "\| $number \| [0-9]+ tokens/s, .*step [0-9.e+-]+x the default row's" || fail "no GPT tokens/s row with --shard-params"
# The attention rows: dptrain's core with math, fused and cudnn on each
# shape in bf16 (cudnn's named fused-fallback: the emulated cuDNN has no
# engines), and PyTorch SDPA's beside them where torch is installed.
for impl in math fused cudnn; do
  ran=$impl
  [[ $impl == cudnn ]] && ran=fused-fallback
  for s in "N 1, H 2, T 20, hd 16" "N 1, H 1, T 16, hd 32"; do
    grep -qE "^\| speed \| attention core fwd\+bwd, one causal layer \($s; attention $ran, 1 GPU, bf16\) \(attention-$impl\) \| $number \| ours $number ms" "$table" ||
      fail "no attention row for $impl at $s"
  done
done
# In tf32, math and fused on the first shape and at head dim 128, not on
# the second shape.
for impl in math fused; do
  for s in "N 1, H 2, T 20, hd 16" "N 1, H 1, T 16, hd 128"; do
    grep -qE "^\| speed \| attention core fwd\+bwd, one causal layer \($s; attention $impl, 1 GPU, tf32\) \(attention-$impl-tf32\) \| $number \| ours $number ms" "$table" ||
      fail "no tf32 attention row for $impl at $s"
  done
  ! grep -qE "hd 32; attention $impl, 1 GPU, tf32" "$table" || fail "a tf32 attention row for $impl on the second shape"
done
# PyTorch's: a number, or skipped and why (torch before 2.0 has no SDPA).
sdpa="attention core fwd+bwd, one causal layer (N 1, H 2, T 20, hd 16; PyTorch SDPA"
grep -F "| speed | $sdpa" "$table" | grep -qE "^\| speed \| .* \| ($number|skipped) \| .+ \|$" ||
  fail "no PyTorch SDPA row"
for p in fp32 tf32 bf16; do
  grep -qE "^\| speed \| GPT step vs its GEMMs \(1 GPU, $p, batch 1 x 16\) \(gpt-gemm-$p\) \| $number \| .* target >= 0.85 \|" "$table" ||
    fail "no GPT step vs GEMMs row for $p"
done
if ((torch)); then
  grep -F "${gpt2}tokens/s and MFU (PyTorch eager, batch 2) |" "$table" |
    grep -qE "\| $number \| [0-9,]+ tokens/s, .* on cpu \|$" || fail "no PyTorch GPT row"
  grep -F "${gpt2}dptrain vs PyTorch eager tokens/s |" "$table" | grep -qE "\| $number \| dptrain " ||
    fail "no dptrain vs PyTorch GPT row"
fi
# The strongest PyTorch peer: torch.compile and fused AdamW, a number, or
# skipped or failed with a reason (torch before 2.0 has no torch.compile).
compiled=$(grep -F "${gpt2}tokens/s and MFU (PyTorch torch.compile, fused AdamW, batch 2) |" "$table" || true)
if ((torch)); then
  grep -qE "\| ($number \| [0-9,]+ tokens/s, .*torch.compile .* on cpu|(skipped|failed) \| torch .+) \|$" <<<"$compiled" ||
    fail "no PyTorch torch.compile row: ${compiled:-none}"
else
  grep -qE '\| skipped \| no PyTorch ' <<<"$compiled" || fail "no skipped torch.compile row: ${compiled:-none}"
fi
((torch)) || echo "no torch for $PYTHON: the PyTorch rows were not checked"
# The step by layer family on the GPU (bf16, the GEMM rows' batch): each
# family's share of the step, and the rows that sum them up.
layers="(1 GPU, bf16, batch 1) (gpt-layers)"
for f in embed pos ln attn dense gelu "res adds" loss optimizer "all GEMMs"; do
  grep -F "| speed | GPT step by layer family: $f $layers |" "$table" |
    grep -qE "^\| speed \| .* \| $number \| ours $number ms, baseline $number ms; ours = device ms" ||
    fail "no GPU layer-family row for $f"
done
for r in "GPT GEMMs inside the step vs replayed bare" "GPT step driven layer by layer vs train_step"; do
  grep -F "| speed | $r $layers |" "$table" | grep -qE "^\| speed \| .* \| $number \| ours $number ms" ||
    fail "no GPU layers row: $r"
done
# The step by kernel (the stand-in ncu's CSV, summed): the whole and each
# kernel's share, heaviest first, and the whole table in logs/.
kernels="| speed | GPT step by kernel (1 GPU, bf16, batch 2)"
has "$kernels (ncu) | ok | 3 launches of 2 kernels, 0.008 ms of kernel time in all;"
has "$kernels: fused_forward_kernel<__nv_bfloat16, 16, __nv_bfloat16> (ncu) | 0.875 | 2 launches, 0.007 ms in all,"
has "$kernels: nvjet_standin (ncu) | 0.125 | 1 launches, "
grep -qF '| `nvjet_standin` | 1 | 0.0010 | 0.1250 |' "$WORK/out/logs/gpt-kernels.md" ||
  fail "no whole kernel table in logs/gpt-kernels.md"
# The fused attention's kernels in depth: the stand-in ncu's report kept
# whole, the row counting its launches, at the first attention shape.
has "| speed | fused attention kernels in depth (bf16, 1,2,20,16) (ncu) | ok | 3 kernel launches profiled: logs/attention-kernels.csv |"
[[ -s $WORK/out/logs/attention-kernels.csv ]] || fail "no logs/attention-kernels.csv"
if ((GPUS == 2)); then
  grep -qE "^\| speed \| all-reduce 1 MiB bus bandwidth vs NCCL \(2 GPUs\) \| $number \|" "$table" ||
    fail "no all-reduce row"
fi
layout=$(grep -cE "^\| speed \| conv .* NCHW vs NHWC.* \| $number \|" "$table" || true)
[[ $layout -eq 18 ]] ||
  fail "$layout channels-last rows, want 18 ((2 layers x (3 passes + 1 step) + the stack) x 2 precisions)"
grep -qE "^\| speed \| conv stack of 2 layers channels-last throughout: .*\(bf16\) \| $number \| .* ms converting; " "$table" ||
  fail "no channels-last row for the whole conv stack in bf16"

# The sanitizer's rows, last (no test failed), through the stand-in: the
# emulated gpu_tests ran the one test under each tool. Every suite pattern
# of its default lists names GPU tests (a suite renamed would leave a tool
# checking nothing).
for tool in memcheck racecheck synccheck; do
  has "| sanitizer | $tool (SANITIZE_FILTER CudaGemm.Fp32MatchesCpu) | clean | 0 errors in 1 tests |"
done
[[ $(grep '^| [a-z]' "$table" | tail -1 | cut -d'|' -f2) == " sanitizer " ]] || fail "the sanitizer's rows are not last"
defaults=$(bash -c '. "$1/tools/gpu-check-tests.sh" && echo "$kernel_tests:$library_tests:$shared_memory_tests:$sanitizer_leave_out"' \
  _ "$DPTRAIN_SOURCE_DIR")
IFS=: read -ra patterns <<<"$defaults"
((${#patterns[@]} >= 10)) || fail "the sanitizer's default suites: $defaults"
for p in "${patterns[@]}"; do
  "$EMULATED_BIN/emulated_gpu_tests" --gtest_filter="$p" --gtest_list_tests | grep -q '^  ' ||
    fail "the sanitizer's pattern $p names no GPU test"
done

# --only: the set-up and the named sections alone (a second run after a
# change, on a GPU lent for minutes); an unknown section is a usage error.
# Once, on 1 GPU.
if ((GPUS == 1)); then
  only_table=$WORK/only.txt
  set +e
  PATH=$WORK/driver:$PATH BUNDLE=$tree BUDGET_S=300 SPEED_REPEATS=2 GPT2_SHAPE=2,2,32,16,64 GPT2_BATCH=2 \
    PEAK_TFLOPS=1 ATTENTION_SHAPES=1,2,20,16 ATTENTION_WIDE_SHAPE=1,1,16,128 \
    timeout -k 5 400 bash "$DPTRAIN_SOURCE_DIR/tools/gpu-check.sh" --only attention >"$only_table" 2>"$WORK/only.err"
  rc=$?
  set -e
  [[ $rc -eq 0 ]] || { tail -20 "$WORK/only.err" >&2; fail "gpu-check --only attention: exit $rc, want 0"; }
  grep -qF "| setup | sections | attention | --only: the others were not run |" "$only_table" ||
    fail "--only attention: no sections row"
  for impl in math fused cudnn; do
    grep -qE "^\| speed \| attention core fwd\+bwd, one causal layer \(N 1, H 2, T 20, hd 16; .*\(attention-$impl\) \| $number \|" \
      "$only_table" || fail "--only attention: no attention row for $impl"
  done
  others=$(grep -E '^\| (tests|training|accuracy|gpt) |tokens/s|GEMMs|NCHW|layer family|step by kernel' "$only_table" || true)
  [[ -z $others ]] || fail "--only attention ran other sections: $others"
  set +e
  bash "$DPTRAIN_SOURCE_DIR/tools/gpu-check.sh" --only attention,nonsense >/dev/null 2>"$WORK/only-bad.err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] && grep -qF "no section 'nonsense'" "$WORK/only-bad.err" ||
    fail "--only with an unknown section: exit $rc, $(cat "$WORK/only-bad.err")"
fi
echo "PASS: gpu-check on $GPUS emulated GPU(s): exit 0, $(wc -l <"$table") lines, $n tests on ${ranks[*]}, $(rows speed) speed rows"
