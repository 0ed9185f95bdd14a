# shellcheck shell=bash disable=SC2154  # uses gpu-check.sh's row, run_for, outcome, work, tmp, B, py, ...
# Implements: the GPT section of tools/gpu-check.sh (sourced, not run):
# - accuracy: a small GPT job (the model of jobs/text_gpt.ini on the
#   bundle's byte-level token set, GPT_STEPS steps of AdamW with clipping
#   and a cosine schedule) on 1 GPU in fp32, tf32 and bf16 and on 2 GPUs in
#   fp32, the loss of every step against the CPU backend's run of the same
#   job, relative to its first loss (bounds as the MLP's: fp32 1e-4, tf32
#   1e-2, bf16 3e-2);
# - speed, on a GPT-2-small-shaped model (GPT2_SHAPE): dptrain's tokens/s
#   and model FLOP utilization in bf16 (dptrain_gpt_bench throughput), the
#   same model in PyTorch eager with bf16 autocast (tools/gpu-check-torch.py
#   gpt), the step against its GEMMs replayed bare through cuBLAS in fp32,
#   tf32 and bf16 (dptrain_gpt_bench gemm, target >= 0.85), the step by
#   layer family in bf16 (dptrain_gpt_bench layers: each family's device
#   time and share of the step, its GEMMs apart), and last the strongest
#   PyTorch peer, the same model through torch.compile with fused AdamW
#   (gpu-check-torch.py gpt --compile: "skipped" or "failed" and why where
#   this torch cannot, never a failure of the check);
# - attention, in bf16: the tokens/s row again with --attention math (the
#   default, auto, is cuDNN's SDPA under bf16 where the build has cuDNN,
#   else fused), and one causal attention layer's core, forward and
#   backward, with math, with fused and with cudnn at ATTENTION_SHAPES (N,H,T,hd, '/'
#   between them; default 8,12,1024,64/4,16,2048,64: dptrain_gpt_bench
#   attention), beside PyTorch's scaled_dot_product_attention on the same
#   shapes with its cuDNN and flash backends (gpu-check-torch.py attention);
#   and in tf32 math and fused at the first shape and at ATTENTION_WIDE_SHAPE
#   (default 8,6,1024,128);
# - the tokens/s row with --recompute blocks: its step time and device
#   buffers against the default row's (issue: at most 1.4x the time, 0.3x
#   the activations);
# - the tokens/s row with --shard-params on the one GPU: its step time
#   against the default row's (issue: at most 1.1x; the gathers and
#   reduce-scatters run from the GPU to itself);
# - last, where the machine has Nsight Compute, the bf16 step by kernel
#   (ncu, each launch's duration; tools/gpu-check-kernels.py sums them):
#   the heaviest kernels' shares of all kernel time, the whole table and
#   the CSV in logs/ ("skipped" or "failed" and why otherwise, never a
#   failure of the check); then the fused attention's kernels at the first
#   attention shape under ncu's speed-of-light, occupancy, launch, memory
#   and warp-state sections, the report in logs/attention-kernels.csv.
# MFU = tokens/s x (6 N + 12 L T D) / peak: N the parameters in matrix
# products (all but the token and position tables), 12 L T D attention's
# two batched products, forward and backward, over the full T x T
# (tools/bench/gpt_throughput_row.cpp derives it); the peak is the GPU's
# dense bf16 tensor-core peak, from its nvidia-smi name (gpt_peak below)
# or PEAK_TFLOPS.

# The demo job: jobs/text_gpt.ini's model and optimizer, few steps.
gpt_model=${GPT_MODEL:-"embed:128,pos,4*(res(ln,attn:4:causal),res(ln,dense:512,gelu:tanh,dense:128)),ln,dense:256"}
gpt_batch=${GPT_BATCH:-32} gpt_steps=${GPT_STEPS:-30}
# GPT-2 small (12 layers, 12 heads, width 768, T 1024, vocab 50304), untied
# head. Batch 16: dptrain_gpt_bench throughput at batch 1 holds 5.40 GiB of
# buffers, 2.43 of them parameters, gradients and AdamW moments, so 2.97
# GiB of activations per sequence (the attention keeps its N·H·T·T weights
# and their gradients): 50 GiB at 16, which leaves an 80 GB GPU room for
# cuBLAS and the bf16 operand copies. The GEMM rows take half the batch:
# the replayed calls' operands (about 10 GB at 8) sit beside the model.
IFS=, read -r gpt2_l gpt2_h gpt2_d gpt2_t gpt2_v <<<"${GPT2_SHAPE:-12,12,768,1024,50304}"
gpt2_batch=${GPT2_BATCH:-16}
gpt_warmup=3  # untimed steps before the timed ones (1 for a quick run)
[[ -n ${SPEED_REPEATS:-} ]] && gpt_warmup=1
gpt2_model="embed:$gpt2_d,pos,$gpt2_l*(res(ln,attn:$gpt2_h:causal),res(ln,dense:$((4 * gpt2_d)),gelu:tanh,dense:$gpt2_d)),ln,dense:$gpt2_v"
gpt2_name="GPT-2 small shape ($gpt2_l layers, $gpt2_h heads, width $gpt2_d, T $gpt2_t, vocab $gpt2_v)"

# gpt_data: sets gpt_data to the bundle's token set, else one made here
# from the bundle's own text (tools/), where the Python has h5py.
gpt_data() {
  gpt_data=$B/data/gpt_text.h5
  [[ -f $gpt_data ]] && return 0
  if [[ -n $py && -f $B/tools/convert_text.py ]] && as_started "$py" -c "import h5py, numpy" 2>/dev/null; then
    run_for 60 "$work/gpt-data.txt" "${start_cmd[@]}" "$py" "$B/tools/convert_text.py" "$B/tools" \
      --output "$tmp/gpt_text.h5" --window 64 && gpt_data=$tmp/gpt_text.h5 && return 0
  fi
  return 1
}

gpt_train() {  # gpt_train NAME NP DEVICE PRECISION -> WORK/NAME.{out,jsonl}
  run_for 120 "$work/$1.out" "${mpirun[@]}" -n "$2" "$dptrain" train --data "$gpt_data" --val-set "" \
    --model "$gpt_model" --loss xent --batch-size "$gpt_batch" --optimizer adamw --lr 3e-3 \
    --beta2 0.95 --weight-decay 0.1 --weight-decay-params matrices --clip-grad-norm 1 \
    --lr-schedule cosine --warmup-steps $((gpt_steps / 6)) --steps "$gpt_steps" --seed 1 \
    --shuffle none --device "$3" --precision "$4" --log-every 1 --metrics "$work/$1.jsonl"
}

gpt_accuracy_rows() {
  local spec p bound np name rc runs=("1:fp32:1e-4" "1:tf32:1e-2" "1:bf16:3e-2" "2:fp32:1e-4")
  gpt_train gpt-cpu-ref 1 cpu fp32
  train_row gpt "CPU reference (fp32, $gpt_steps steps)" gpt-cpu-ref $?
  for spec in "${runs[@]}"; do
    IFS=: read -r np p bound <<<"$spec"
    name="$np GPU$( ((np > 1)) && echo s) $p vs CPU, loss of each of $gpt_steps steps"
    if ((ngpu == 0)); then row gpt "$name" skipped "no GPU"; continue; fi
    if ((ngpu < np)); then row gpt "$name" skipped "needs $np GPUs"; continue; fi
    gpt_train "gpt-$np-$p" "$np" cuda "$p"
    rc=$?
    if ((rc != 0)); then train_row gpt "$name" "gpt-$np-$p" "$rc"; continue; fi
    loss_row gpt "$name" "gpt-$np-$p" gpt-cpu-ref "$bound" "$gpt_steps"
  done
}

# gpt_peak: sets peak (TFLOPS, dense bf16 tensor cores, no sparsity) and
# peak_from from PEAK_TFLOPS or the GPU's name; peak 0 when unknown.
gpt_peak() {
  local name
  name=$(as_started timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  peak=0 peak_from="no peak known for ${name:-this GPU}; PEAK_TFLOPS names one"
  if [[ -n ${PEAK_TFLOPS:-} ]]; then
    peak=$PEAK_TFLOPS peak_from="PEAK_TFLOPS"
    return
  fi
  case $name in
    *H100*PCIe* | *H100*NVL* | *H200*NVL*) return ;;  # other clocks and power limits: not in this table
    *H100* | *H200*) peak=989.4 ;;                    # the SXM parts' dense bf16 figure
    *A100*) peak=312 ;;                               # A100's dense bf16 figure (SXM and PCIe)
    *) return ;;
  esac
  peak_from="$name, dense bf16"
}

# gpt_bench_rows NAME LIMIT ARGS...: dptrain_gpt_bench on the GPT-2 shape.
gpt_bench_rows() {
  local name=$1 limit=$2
  shift 2
  bench_rows "$gpt_bench" "$name" "$limit" "$@" --model "$gpt2_model" --tokens "$gpt2_t" --vocab "$gpt2_v" \
    --device cuda
}

# The throughput row: dptrain's tokens/s and MFU in bf16 (gpt_per_s: the
# default attention's, for the PyTorch rows); `gpt_throughput_rows math`:
# the same with --attention math; `gpt_throughput_rows "" blocks` with
# --recompute blocks (its device buffers against the default row's);
# `gpt_throughput_rows "" "" shard` with --shard-params on the one GPU (its
# gathers and reduce-scatters from itself: the step against the default
# row's, issue target at most 1.1x).
gpt_throughput_rows() {
  local rc j mfu per_s detail result impl=${1:-} recompute=${2:-} shard=${3:-}
  local log=$work/gpt-throughput${impl:+-$impl}${recompute:+-recompute}${shard:+-shard}.txt
  run_for 120 "$log" "${mpirun[@]}" -n 1 "$gpt_bench" throughput --model "$gpt2_model" \
    --tokens "$gpt2_t" --vocab "$gpt2_v" --batch "$gpt2_batch" --device cuda --precision bf16 \
    --peak-tflops "$peak" --repeats "${SPEED_REPEATS:-10}" --warmup "$gpt_warmup" ${impl:+--attention "$impl"} \
    ${recompute:+--recompute "$recompute"} ${shard:+--shard-params}
  rc=$?
  j=$(grep '^{"gpt_throughput"' "$log" | tail -1)
  local who="dptrain${impl:+, --attention $impl}${recompute:+, --recompute $recompute}${shard:+, --shard-params}"
  if ((rc != 0)) || [[ -z $j ]]; then
    result=$(outcome "$rc")
    [[ $result == ok ]] && result="FAILED (no gpt_throughput line)"
    row speed "$gpt2_name bf16: tokens/s and MFU ($who)" "$result" "$(tail -1 "$log")"
  else
    per_s=$(field tokens_per_s <<<"$j")
    mfu=$(field mfu <<<"$j")
    [[ -n $mfu ]] && mfu=$(awk -v m="$mfu" 'BEGIN {printf "%.3g", m}')
    detail=$(awk -v t="$per_s" -v ms="$(field step_ms <<<"$j")" -v f="$(field flops_per_token <<<"$j")" \
      -v n="$(field matmul_params <<<"$j")" -v a="$(field achieved_tflops <<<"$j")" -v g="$(field buffer_mib <<<"$j")" \
      'BEGIN {printf "%.0f tokens/s, %.4g ms a step; %.4g MFLOP per token (6 N + 12 L T D, N = %.4g M); %.3g TFLOPS achieved; device buffers %.3g GiB", t, ms, f / 1e6, n / 1e6, a, g / 1024}')
    if [[ -n $mfu ]]; then detail+="; peak $peak TFLOPS ($peak_from)"; else detail+="; $peak_from"; fi
    if [[ -n $shard && ${gpt_per_s:-0} != 0 ]]; then
      detail+=$(awk -v a="$gpt_per_s" -v b="$per_s" 'BEGIN {printf "; step %.3gx the default row'"'"'s (target at most 1.1x)", a / b}')
    fi
    row speed "$gpt2_name bf16: tokens/s and MFU ($who, batch $gpt2_batch)" "${mfu:-peak unknown}" "$detail"
  fi
  if [[ -z $impl && -z $recompute && -z $shard ]]; then gpt_per_s=${per_s:-0}; fi
}

# The attention rows in bf16: dptrain's core with math, with fused and
# with cudnn (cuDNN's SDPA; the row names fused-fallback where cuDNN
# refused the shape); in tf32 on the first shape and at head dim 128
# (ATTENTION_WIDE_SHAPE, default 8,6,1024,128: the same width, where
# fused takes dynamic shared memory, one warp a block), math (cuBLAS's
# TF32 GEMMs) and fused (the kernels' TF32 wmma); then PyTorch SDPA's in
# bf16 on the bf16 rows' shapes.
gpt_attention_rows() {
  local impl rc shapes=${ATTENTION_SHAPES:-8,12,1024,64/4,16,2048,64} out=$work/attention-torch.tsv
  for impl in math fused cudnn; do
    bench_rows "$gpt_bench" "attention-$impl" 120 attention --device cuda --precision bf16 \
      --attention "$impl" --attention-shape "$shapes" --repeats "${SPEED_REPEATS:-20}" --warmup 2
  done
  for impl in math fused; do
    bench_rows "$gpt_bench" "attention-$impl-tf32" 60 attention --device cuda --precision tf32 \
      --attention "$impl" --attention-shape "${shapes%%/*}/${ATTENTION_WIDE_SHAPE:-8,6,1024,128}" \
      --repeats "${SPEED_REPEATS:-20}" --warmup 2
  done
  if [[ -z $py ]]; then
    row speed "attention core fwd+bwd (PyTorch SDPA)" skipped "no Python"
    return
  fi
  run_for 120 "$out" "${start_cmd[@]}" "$py" tools/gpu-check-torch.py attention --shapes "$shapes" \
    --steps "${SPEED_REPEATS:-20}"
  rc=$?
  grep $'^speed\t' "$out" >>"$rows" || true
  write_table
  ((rc == 0)) || row speed "attention core fwd+bwd (PyTorch SDPA)" "$(outcome "$rc")" "$(tail -1 "$out")"
}

# gpt_torch_rows eager|compiled LIMIT: PyTorch's tokens/s and MFU on the
# GPT-2 shape, and dptrain's (gpt_per_s) against it. The compiled row
# never fails the check: where it cannot finish, it says "failed" and why.
gpt_torch_rows() {
  local how=$1 limit=$2 rc out=$work/gpt-torch-$1.tsv who="PyTorch eager" extra=()
  [[ $how == compiled ]] && who="PyTorch torch.compile, fused AdamW" extra=(--compile)
  if [[ -z $py ]]; then
    row speed "$gpt2_name bf16: tokens/s and MFU ($who, batch $gpt2_batch)" skipped "no Python"
    return
  fi
  run_for "$limit" "$out" "${start_cmd[@]}" "$py" tools/gpu-check-torch.py gpt "${extra[@]}" \
    --shape "$gpt2_l,$gpt2_h,$gpt2_d,$gpt2_t,$gpt2_v" --batch "$gpt2_batch" --peak "$peak" \
    --dptrain "${gpt_per_s:-0}" --steps "${SPEED_REPEATS:-10}" --warmup "$gpt_warmup" --name "$gpt2_name"
  rc=$?
  grep $'^speed\t' "$out" >>"$rows" || true
  write_table
  ((rc == 0)) && return
  if [[ $how == compiled ]]; then
    row speed "$gpt2_name bf16: tokens/s and MFU ($who, batch $gpt2_batch)" failed \
      "$(outcome "$rc" | tr '[:upper:]' '[:lower:]') (limit $limit s): $(tail -1 "$out" | tr '\t' ' ')"
  else
    row speed "$gpt2_name bf16: $who" "$(outcome "$rc")" "$(tail -1 "$out")"
  fi
}

# The step by layer family in bf16 (dptrain_gpt_bench layers), at the GEMM
# rows' batch: it holds the recorded model, its opened-up twin and the
# replayed calls' operands. Each row: the family's share of the step, its
# device time, forward and backward, and the GEMMs in it.
gpt_layer_rows() {
  local batch=$1 rc line name note out=$work/gpt-layers.txt
  run_for 150 "$out" "${mpirun[@]}" -n 1 "$gpt_bench" layers --model "$gpt2_model" --tokens "$gpt2_t" \
    --vocab "$gpt2_v" --device cuda --precision bf16 --batch "$batch" --repeats "${SPEED_REPEATS:-5}" \
    --warmup "$((gpt_warmup > 1 ? 2 : 1))"
  rc=$?
  if ((rc != 0)) || ! grep -q '^{"row"' "$out"; then
    local result
    result=$(outcome "$rc")
    [[ $result == ok ]] && result="FAILED (no rows)"
    row speed "GPT step by layer family (1 GPU, bf16, batch $batch) (gpt-layers)" "$result" "$(tail -1 "$out")"
    return
  fi
  grep '^{"row"' "$out" | while read -r line; do
    name=$(sed -n 's/.*"row":"\([^"]*\)".*/\1/p' <<<"$line")
    note=$(sed -n 's/.*"note":"\([^"]*\)".*/\1/p' <<<"$line")
    row speed "$name (gpt-layers)" "$(field ratio <<<"$line")" \
      "ours $(field ours <<<"$line") ms, baseline $(field baseline <<<"$line") ms; ${note%%; baseline*}"
  done
}

# The step by kernel, where the machine has Nsight Compute (ncu): the
# GPT-2 row's bf16 step (one warm-up and one timed step, default
# attention) with each launch's duration alone (one replay pass), the
# clocks and caches left as they run (--clock-control none, --cache-control
# none). The CSV and the whole table stay in logs/; the rows name the
# heaviest kernels by their share of all kernel time. Never fails the
# check: a machine without ncu, or without access to the GPU's counters,
# says so in the row.
find_ncu() {
  local c
  for c in "$(command -v ncu 2>/dev/null)" /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu \
    /opt/nvidia/nsight-compute/*/ncu; do
    [[ -n $c && -x $c ]] && { echo "$c"; return 0; }
  done
  return 1
}
gpt_kernel_rows() {
  local ncu rc csv=$work/gpt-kernels.csv log=$work/gpt-kernels.txt
  local name="GPT step by kernel (1 GPU, bf16, batch $gpt2_batch)"
  if ! ncu=$(find_ncu); then
    row speed "$name (ncu)" skipped "no Nsight Compute (ncu) on this machine"
    return
  fi
  run_for 180 "$log" "${mpirun[@]}" -n 1 "$ncu" --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --print-units base --csv --log-file "$csv" \
    "$gpt_bench" throughput --model "$gpt2_model" --tokens "$gpt2_t" --vocab "$gpt2_v" \
    --batch "$gpt2_batch" --device cuda --precision bf16 --peak-tflops "$peak" --repeats 1 --warmup 1
  rc=$?
  if ((rc != 0)); then
    row speed "$name (ncu)" failed "$(outcome "$rc" | tr '[:upper:]' '[:lower:]'): $(tail -1 "$log")"
    return
  fi
  if [[ -z $py ]]; then
    row speed "$name (ncu)" skipped "no Python to sum the CSV (logs/gpt-kernels.csv)"
    return
  fi
  if "${start_cmd[@]}" "$py" tools/gpu-check-kernels.py "$csv" --label "$name" \
    --markdown "$work/gpt-kernels.md" >"$work/gpt-kernels.tsv" 2>>"$log"; then
    grep $'^speed\t' "$work/gpt-kernels.tsv" >>"$rows" || true
    write_table
  else
    row speed "$name (ncu)" failed "$(tail -1 "$log")"
  fi
}

# The fused attention's kernels in depth, where ncu runs: the second
# forward and backward (the first warms up) of the first attention shape's
# core (bf16, --attention fused), its four kernels, under Nsight Compute's
# speed-of-light, occupancy, launch, memory-workload and warp-state
# sections, which say what bounds each kernel (the tensor pipes, shared
# memory, latency or occupancy) and with how many registers and blocks an
# SM it ran. The report (ncu's details page, every metric of
# every launch) stays in logs/attention-kernels.csv for whoever tunes them;
# the row says how many launches it holds. Never fails the check.
attention_kernel_profile() {
  local ncu rc launches csv=$work/attention-kernels.csv log=$work/attention-kernels.txt
  local shape=${ATTENTION_SHAPES:-8,12,1024,64}
  shape=${shape%%/*}
  local name="fused attention kernels in depth (bf16, $shape)"
  if ! ncu=$(find_ncu); then
    row speed "$name (ncu)" skipped "no Nsight Compute (ncu) on this machine"
    return
  fi
  run_for 120 "$log" "${mpirun[@]}" -n 1 "$ncu" --clock-control none \
    --kernel-name regex:'fused_|row_dot' --launch-skip 4 --launch-count 4 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section WarpStateStats \
    --page details --csv --log-file "$csv" \
    "$gpt_bench" attention --device cuda --precision bf16 --attention fused \
    --attention-shape "$shape" --repeats 1 --warmup 1
  rc=$?
  if ((rc != 0)); then
    row speed "$name (ncu)" failed "$(outcome "$rc" | tr '[:upper:]' '[:lower:]'): $(tail -1 "$log")"
    return
  fi
  launches=$(awk -F, '$1 ~ /^"[0-9]+"$/ { print $1 }' "$csv" | sort -u | wc -l)
  row speed "$name (ncu)" ok "$launches kernel launches profiled: logs/attention-kernels.csv"
}

gpt_section() {
  if ! wanted gpt; then
    :
  elif ! gpt_data; then
    row gpt "token set" FAILED "no bundled gpt_text.h5 and no Python with h5py to make one"
  else
    gpt_accuracy_rows
  fi
  wanted gpt2 || wanted attention || wanted gpt-gemm || wanted kernels || return 0
  if ((ngpu == 0)); then
    row speed "$gpt2_name: tokens/s and MFU, step vs its GEMMs" skipped "no GPU"
    return
  fi
  if [[ ! -x $gpt_bench ]]; then
    row speed "$gpt2_name: tokens/s and MFU, step vs its GEMMs" "not built" "no dptrain_gpt_bench in the bundle"
    return
  fi
  gpt_peak
  if wanted gpt2; then
    gpt_throughput_rows
    gpt_torch_rows eager 150
    gpt_throughput_rows math
    gpt_throughput_rows "" blocks
    gpt_throughput_rows "" "" shard
  fi
  wanted attention && gpt_attention_rows
  local p gemm_batch=$(((gpt2_batch + 1) / 2))
  if wanted gpt-gemm; then
    for p in fp32 tf32 bf16; do
      gpt_bench_rows "gpt-gemm-$p" 90 gemm --precision "$p" --batch "$gemm_batch" \
        --repeats "${SPEED_REPEATS:-5}" --warmup "$((gpt_warmup > 1 ? 2 : 1))"
    done
    gpt_layer_rows "$gemm_batch"
  fi
  wanted gpt2 && gpt_torch_rows compiled 180  # torch.compile takes 20 to 30 s of it on an H200
  wanted kernels && gpt_kernel_rows
  wanted attention && attention_kernel_profile
  return 0
}
