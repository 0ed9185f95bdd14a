#!/usr/bin/env bash
# Implements: the GPU check, one script for a machine that has an NVIDIA GPU
# and its driver but no Open MPI, HDF5, BLAS, ssh or network (Python and
# PyTorch are used when present). It unpacks the bundle of
# tools/gpu-bundle.sh, checks glibc and every library, launches
# `orterun -n 1 true`, then runs every GPU test (1 rank; 2 with 2+ GPUs;
# each that failed once more alone), the training runs (1 GPU; 2 GPUs
# when present), fp32/TF32/bf16 accuracy
# against the CPU reference, the speed rows of docs/gpu.md and the GPT
# rows (tools/gpu-check-gpt.sh: a GPT job's losses against the CPU's on 1
# and 2 GPUs; a GPT-2-small-shaped model's tokens/s and MFU, against
# PyTorch eager and torch.compile, its step against its GEMMs and by layer
# family), and the tests of our own kernels under compute-sanitizer
# (tools/gpu-check-tests.sh: right after the tests where one failed, else
# last), within 9 minutes, and prints one table.
#   Here (Debian, network):  tools/gpu-bundle.sh     -> .gpu-bundle/ (carry it)
#   There:                   tools/gpu-check.sh [--out DIR]
# (or tools/gpu-check.sh inside the unpacked bundle, which carries it).
# --out DIR (or DPTRAIN_GPU_CHECK_OUT=DIR): where the results stay, written
# as they come (a run cut short keeps what it had): table.md (the table,
# rewritten after every row, its last line saying what ran last or how it
# ended), rows.tsv, and logs/: every step's output, notes.txt (what the
# console was told), env-start.txt, env-check.txt, machine.txt (kernel,
# driver, nvidia-smi, nvcc, MANIFEST), python.txt, cuda-libs.txt, ldd.txt;
# and results.tgz, all of that in one archive (for a machine that hands
# back only a few files), rewritten before every step and at the end.
# --only LIST (or ONLY=LIST): the set-up and only these sections (comma
# separated), for a second run after a change: tests (GTEST_FILTER narrows
# them), training, speed, gpt, gpt2, attention, gpt-gemm, kernels,
# sanitizer (SANITIZE_FILTER, a gtest filter, replaces its tests)
# (docs/gpu.md says what each holds).
# The folder is never emptied or removed; without it the logs are.
# Exit: 0 everything ran and passed; 1 something failed; 77 no GPU visible
# (everything that runs without one passed; the GPU rows say skipped).
# Environment: BUNDLE (default .gpu-bundle/dptrain-gpu.tar.gz, or this
# folder when the script runs from an unpacked bundle; or a folder laid out
# as the unpacked tarball, used in place; without root/ in it the
# machine's own Open MPI runs it), DPTRAIN_TORCH_PYTHON (the Python that
# holds PyTorch, where the search of tools/gpu-check-env.sh misses it),
# DPTRAIN_CUDA_LIB_DIRS (folders of CUDA libraries to consider first),
# STEPS (training steps per speed run, default 400), BUDGET_S (default
# 530, inside the 570 s of docs/gpu.md's command line: the GPT rows take
# two to three minutes on a GPU, torch.compile's row and the profiles
# last, then the sanitizer's rows where no test failed), PEAK_TFLOPS (the
# GPU's dense bf16 peak for the MFU rows, where the table of
# tools/gpu-check-gpt.sh does not know its name). For a quick
# run whose speed figures mean nothing
# (tests/emulated/test_emulated_gpu_check.sh runs the whole check on the
# emulated GPU): SPEED_REPEATS (timed repeats of every speed row, after one
# warm-up; default: each tool's own), SPEED_ROWS (rows per step of the CNN
# and convolution rows, default 128), ALLREDUCE_MIB (default 1,16,256);
# GPT_MODEL, GPT_BATCH and GPT_STEPS (the GPT job of the accuracy rows:
# default jobs/text_gpt.ini's model, batch 32, 30 steps; T is the token
# set's), GPT2_SHAPE (layers,heads,width,T,vocab of the GPT speed rows,
# default 12,12,768,1024,50304) and GPT2_BATCH (default 16; the GEMM rows
# take half).
set -uo pipefail

out_dir=${DPTRAIN_GPU_CHECK_OUT:-}
only=${ONLY:-}
while (($#)); do
  case $1 in
    --out) out_dir=${2:?"--out needs a folder"}; shift 2 ;;
    --out=*) out_dir=${1#--out=}; shift ;;
    --only) only=${2:?"--only needs a list of sections"}; shift 2 ;;
    --only=*) only=${1#--only=}; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (usage: tools/gpu-check.sh [--out DIR] [--only LIST])" >&2; exit 2 ;;
  esac
done
sections="tests training speed gpt gpt2 attention gpt-gemm kernels sanitizer"
for x in ${only//,/ }; do
  [[ " $sections " == *" $x "* ]] || { echo "gpu-check: --only: no section '$x' (sections: $sections)" >&2; exit 2; }
done
wanted() { [[ -z $only || ",$only," == *",$1,"* ]]; }  # wanted SECTION: whether it runs
if [[ -n $out_dir ]] && ! { mkdir -p "$out_dir" && out_dir=$(cd "$out_dir" && pwd); }; then
  echo "gpu-check: cannot make $out_dir" >&2
  exit 1
fi
here=$(cd "$(dirname "$0")/.." && pwd) && cd "$here" || exit 1
# Run from inside an unpacked bundle: the bundle is this folder.
[[ -z ${BUNDLE:-} && -f MANIFEST && -d bin ]] && BUNDLE=$here
bundle=${BUNDLE:-.gpu-bundle/dptrain-gpu.tar.gz}
steps=${STEPS:-400}
budget=${BUDGET_S:-530}
deadline=$((SECONDS + budget))
# The speed tools' repeats and sizes: their own unless the quick-run knobs say.
speed=() layout=()
[[ -n ${SPEED_REPEATS:-} ]] && speed+=(--repeats "$SPEED_REPEATS" --warmup 1) &&
  layout+=(--rounds 1 --passes "$SPEED_REPEATS")
[[ -n ${SPEED_ROWS:-} ]] && layout+=(--rows "$SPEED_ROWS")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT  # the unpacked bundle; never the --out folder
work=${out_dir:+$out_dir/logs}
work=${work:-$tmp/logs}
mkdir -p "$work"
rows=${out_dir:-$tmp}/rows.tsv
: >"$rows"
failed=0 ngpu=0 gpu_name="no GPU" step="set-up" ended=
note() { echo "gpu-check: $*" >&2; echo "$*" >>"$work/notes.txt"; }
row() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$rows"
  case $3 in FAILED* | "NOT FOUND"* | "TIMED OUT"* | OVER*) failed=1 ;; esac
  write_table
}
# The table under --out, rewritten whole after every row and step.
write_table() {
  [[ -n $out_dir ]] || return 0
  { print_table; echo "_${ended:-still running: $step, $SECONDS s in}_"; } >"$out_dir/table.md.new" &&
    mv -f "$out_dir/table.md.new" "$out_dir/table.md"
}
# results.tgz under --out: the folder as it stands, in one archive. Made
# outside the folder (tar writing into the folder it reads finds it
# changed), then put in place whole.
write_archive() {
  [[ -n $out_dir ]] || return 0
  if tar -C "$out_dir" --exclude=./results.tgz --exclude=./results.tgz.new -czf "$tmp/results.tgz" . \
    2>"$tmp/results.err"; then
    cp -f "$tmp/results.tgz" "$out_dir/results.tgz.new" && mv -f "$out_dir/results.tgz.new" "$out_dir/results.tgz"
  else
    note "results.tgz not rewritten: $(tr '\n' ' ' <"$tmp/results.err")"
  fi
}
# shellcheck source=tools/gpu-check-env.sh
. tools/gpu-check-env.sh
# shellcheck source=tools/gpu-check-tests.sh
. tools/gpu-check-tests.sh
# shellcheck source=tools/gpu-check-gpt.sh
. tools/gpu-check-gpt.sh
save_start_env
# CMD... in the environment the check started with (for timeout and run_for).
start_cmd=(env -i "${start_env[@]}")
# What every launch takes, the smoke launch's included.
mpirun=(orterun --oversubscribe --bind-to none)

# run_for LIMIT OUT CMD...: CMD under timeout, stdout+stderr to OUT, within
# what is left of the budget; 124 timed out, 125 no time left to start it.
run_for() {
  local t=$1 out=$2 left=$((deadline - SECONDS))
  shift 2
  step=${out##*/} && write_table && write_archive
  ((left < t)) && t=$left
  ((t > 5)) || return 125
  timeout -k 5 "$t" "$@" >"$out" 2>&1
}
outcome() {  # outcome RC -> a result word for a row
  case $1 in 0) echo ok ;; 124 | 137) echo "TIMED OUT" ;; 125) echo "TIMED OUT (the $budget-second budget was spent before it)" ;;
    *) echo "FAILED (exit $1)" ;; esac
}

print_table() {
  echo
  echo "### dptrain GPU check: $gpu_name ($(date -u +%Y-%m-%d))"
  echo
  echo "| section | check | result | detail |"
  echo "|---|---|---|---|"
  while IFS=$'\t' read -r s c r d; do echo "| $s | $c | $r | $d |"; done <"$rows"
  echo
}
finish() {
  local rc=0
  ((failed)) && rc=1
  ((!failed && ngpu == 0)) && rc=77
  ended="finished: exit $rc after $SECONDS s"
  write_table
  print_table
  note "$(wc -l <"$rows") rows, $(grep -c $'\t\\(FAILED\\|TIMED OUT\\|OVER\\|NOT FOUND\\)' "$rows") failed, $((SECONDS)) s; exit $rc${out_dir:+; table and logs in $out_dir, all of it in $out_dir/results.tgz}"
  write_archive
  exit "$rc"
}

# --- setup: bundle, glibc, libraries, smoke launch ----------------------------------
find_python
[[ -e $bundle ]] || { row setup bundle FAILED "no $bundle: run tools/gpu-bundle.sh and carry .gpu-bundle/"; finish; }
unpack_bundle "$bundle" "$tmp/bundle" || finish
check_glibc || finish
setup_env
record_environment
check_libraries || finish
check_cudnn
smoke_launch || finish
if as_started sh -c "command -v nvidia-smi" >/dev/null; then
  ngpu=$(as_started timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  gpu_name=$(as_started timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
else  # the driver's device files, without its tool
  ngpu=$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)
  gpu_name="(no nvidia-smi)"
fi
row setup GPUs "$ngpu" "${gpu_name}"
((ngpu > 0)) || gpu_name="no GPU"
[[ -z $only ]] || row setup sections "$only" "--only: the others were not run"

# --- every GPU test, by name (tools/gpu-check-tests.sh) ---------------------------------
tests_failed=0
wanted tests && tests_section
# Diagnosis first: where a test failed, the sanitizer runs now; else last.
((tests_failed)) && wanted sanitizer && sanitizer_section

# --- training: speed runs and the accuracy against the CPU reference -------------------------
data=$B/data/synthetic.h5
if [[ ! -f $data && -n $py ]] && as_started "$py" -c "import h5py, numpy" 2>/dev/null; then
  "${start_cmd[@]}" "$py" tools/make_synthetic.py "$tmp/synthetic.h5" --n 8192 --val-n 1024 --shape 28,28 \
    --classes 10 --dtype uint8 --seed 1 >/dev/null && data=$tmp/synthetic.h5
fi
train() {  # train NAME NP DEVICE PRECISION STEPS LOG_EVERY -> WORK/NAME.{out,jsonl}
  run_for 120 "$work/$1.out" "${mpirun[@]}" -n "$2" "$dptrain" train --data "$data" --val-set "" \
    --model dense:256,relu,dense:256,relu,dense:10 --loss xent --batch-size 128 --optimizer adam \
    --lr 1e-3 --steps "$5" --seed 1 --shuffle none --device "$3" --precision "$4" \
    --log-every "$6" --metrics "$work/$1.jsonl"
}
field() { sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p"; }  # field NAME < JSON lines
losses() { grep '"event":"train"' "$work/$1.jsonl" 2>/dev/null | field loss; }
summary() {  # summary NAME -> "loss A -> B, N samples/s"
  local l
  l=$(losses "$1")
  echo "loss $(head -1 <<<"$l") -> $(tail -1 <<<"$l"), $(grep '"event":"summary"' "$work/$1.jsonl" | field samples_per_s) samples/s"
}
train_row() {  # train_row SECTION CHECK NAME RC
  local result
  result=$(outcome "$4")
  if [[ $result == ok ]]; then row "$1" "$2" ok "$(summary "$3")"
  else row "$1" "$2" "$result" "$(tail -2 "$work/$3.out" 2>/dev/null | tr '\n\t' '  ')"; fi
}
# loss_row SECTION CHECK RUN REF BOUND STEPS: the largest difference of a
# step's loss between RUN and REF, relative to REF's first loss (the
# problem's scale), against BOUND; FAILED when RUN logged fewer steps.
loss_row() {
  local worst verdict
  worst=$(paste <(losses "$3") <(losses "$4") | awk '
    NR == 1 {scale = $2 < 0 ? -$2 : $2}
    $1 != "" && $2 != "" {d = $1 - $2; if (d < 0) d = -d; r = d / scale; if (r > m) m = r; n++}
    END {printf "%.3g %d", m, n}')
  verdict=$(awk -v w="${worst% *}" -v b="$5" 'BEGIN {print (w <= b) ? "ok" : "OVER"}')
  ((${worst#* } < $6)) && verdict="FAILED (${worst#* } of $6 steps logged)"
  row "$1" "$2" "$verdict" "largest difference ${worst% *} of the first loss, over ${worst#* } steps (bound $5); $(summary "$3")"
}
if ! wanted training; then
  :
elif [[ ! -f $data ]]; then
  row training "data set" FAILED "no bundled synthetic.h5 and no Python with h5py to make one"
else
  every=$((steps >= 16 ? steps / 8 : 1))  # 50 at the default 400 steps
  for p in fp32 tf32 bf16; do
    if ((ngpu == 0)); then row training "1 GPU $p, $steps steps" skipped "no GPU"; continue; fi
    train "$p" 1 cuda "$p" "$steps" "$every"
    train_row training "1 GPU $p, $steps steps" "$p" $?
  done
  if ((ngpu >= 2)); then
    train ddp2 2 cuda fp32 "$steps" "$every"
    train_row training "2 GPUs fp32, $steps steps" ddp2 $?
  else
    row training "2 GPUs fp32" skipped "needs 2 GPUs"
  fi

  # Accuracy: 20 steps, the loss of every step against the CPU backend's,
  # the difference relative to the CPU run's first loss (the problem's
  # scale): the synthetic set is learnt fast, its loss falls from about 2.3
  # to below 0.01 in these 20 steps, and a difference relative to such a
  # loss says nothing of the precision (TF32 was 7% off there on the
  # emulated GPU).
  train cpu-ref 1 cpu fp32 20 1
  train_row accuracy "CPU reference (fp32, 20 steps)" cpu-ref $?
  for spec in fp32:1e-4 tf32:1e-2 bf16:3e-2; do
    p=${spec%%:*} bound=${spec#*:}
    if ((ngpu == 0)); then row accuracy "$p vs CPU, loss of each of 20 steps" skipped "no GPU"; continue; fi
    train "acc-$p" 1 cuda "$p" 20 1
    rc=$?
    if ((rc != 0)); then train_row accuracy "$p vs CPU" "acc-$p" "$rc"; continue; fi
    loss_row accuracy "$p vs CPU, loss of each of 20 steps" "acc-$p" cpu-ref "$bound" 20
  done
fi

# --- speed rows ---------------------------------------------------------------------
bench_rows() {  # bench_rows PROGRAM NAME LIMIT ARGS...: a bench tool's JSON rows -> table rows
  local prog=$1 name=$2 limit=$3 rc line target
  shift 3
  run_for "$limit" "$work/$name.txt" "${mpirun[@]}" -n 1 "$prog" "$@"
  rc=$?
  if ((rc != 0)); then row speed "${prog##*/} $*" "$(outcome "$rc")" "$(tail -1 "$work/$name.txt")"; return; fi
  grep '^{"row"' "$work/$name.txt" | while read -r line; do
    target=$(sed -n 's/.*"target":"\([^"]*\)".*/\1/p' <<<"$line")
    # A --cuda-graphs row whose step could not be recorded says so here.
    unrecorded=
    grep -q "NOT recorded" <<<"$line" && unrecorded=", NOT recorded as a graph (logs/$name.txt says why)"
    row speed "$(sed -n 's/.*"row":"\([^"]*\)".*/\1/p' <<<"$line") ($name)" "$(field ratio <<<"$line")" \
      "ours $(field ours <<<"$line") ms, baseline $(field baseline <<<"$line") ms${target:+, target $target}$unrecorded"
  done
}
speed_section() {
  for p in fp32 tf32 bf16; do
    if ((ngpu == 0)); then row speed "$p step vs its 8 GEMMs (dptrain_bench gemm)" skipped "no GPU"; continue; fi
    bench_rows "$bench" "gemm-$p" 60 gemm --device cuda --precision "$p" --repeats 200 "${speed[@]}"
  done
  if ((ngpu > 0)); then
    if [[ -n $py ]]; then
      run_for 120 "$work/torch.tsv" "${start_cmd[@]}" "$py" tools/gpu-check-torch.py "$work"
      rc=$?
      grep $'^speed\t' "$work/torch.tsv" >>"$rows" || true
      ((rc == 0)) || row speed "PyTorch rows" "$(outcome "$rc")" "$(tail -1 "$work/torch.tsv")"
    else
      row speed "PyTorch eager, bare GEMMs, data wait" skipped "no Python"
    fi
  fi
  # All-reduce: dptrain's communicator against NCCL's own all-reduce, same bytes.
  if ((ngpu >= 2)); then
    run_for 90 "$work/nccl.txt" "${mpirun[@]}" -n "$ngpu" "$nccl_rate" --mib "${ALLREDUCE_MIB:-1,16,256}" \
      ${SPEED_REPEATS:+--repeats "$SPEED_REPEATS"}
    rc=$?
    if ((rc == 0)); then
      grep '^{' "$work/nccl.txt" | while read -r line; do
        row speed "$(sed -n 's/.*"row":"\([^"]*\)".*/\1/p' <<<"$line") bus bandwidth vs NCCL ($ngpu GPUs)" \
          "$(field ratio <<<"$line")" "dptrain $(field ours_busbw_gbs <<<"$line") GB/s, NCCL $(field nccl_busbw_gbs <<<"$line") GB/s, target >= 0.9"
      done
    else
      row speed "all-reduce bus bandwidth vs NCCL" "$(outcome "$rc")" "$(tail -1 "$work/nccl.txt")"
    fi
  else
    # One rank moves nothing; this only shows that the tool starts (NCCL loads).
    run_for 30 "$work/nccl.txt" "${mpirun[@]}" -n 1 "$nccl_rate" --mib 1 --repeats 2
    rc=$?
    if ((rc == 0)); then started=ok
    else started="exit $rc: $(grep -m1 'dptrain_nccl_rate' "$work/nccl.txt" || tail -1 "$work/nccl.txt")"; fi
    row speed "all-reduce bus bandwidth vs NCCL" skipped "needs 2+ GPUs (dptrain_nccl_rate on 1 rank: $started)"
  fi
  # CNN step against the bare cuDNN/cuBLAS time of its layers: dptrain_bench's
  # cnn mode, where this build has one (it comes with the cuDNN layers).
  run_for 30 "$work/bench-help.txt" "${mpirun[@]}" -n 1 "$bench" --help
  if grep -qw cnn "$work/bench-help.txt"; then
    for p in fp32 tf32 bf16; do
      if ((ngpu == 0)); then row speed "$p CNN step vs bare cuDNN/cuBLAS layers (target >= 0.85)" skipped "no GPU"
      else bench_rows "$bench" "cnn-$p" 60 cnn --device cuda --precision "$p" "${speed[@]}" ${SPEED_ROWS:+--batch "$SPEED_ROWS"}; fi
    done
  else
    row speed "CNN step vs bare cuDNN/cuBLAS layers (target >= 0.85)" "not built" "dptrain_bench has no cnn mode in this build"
  fi
  # Channels-last: the demo CNN's cuDNN convolutions in NCHW (what the layers
  # use) against NHWC, per pass, per layer's step with conversions at its
  # edges, and for the conv stack with conversions only at the network's
  # edges, in tf32 and bf16 (dptrain_conv_layout). No target: the rows decide
  # whether channels-last would pay, and where to convert.
  if ((ngpu == 0)); then
    row speed "conv passes NCHW vs NHWC (tf32, bf16)" skipped "no GPU"
  elif [[ ! -x $conv_layout ]]; then
    row speed "conv passes NCHW vs NHWC (tf32, bf16)" "not built" "no dptrain_conv_layout in the bundle"
  else
    run_for 60 "$work/layout.txt" "$conv_layout" "${layout[@]}"
    rc=$?
    if ((rc != 0)); then
      row speed "conv passes NCHW vs NHWC (dptrain_conv_layout)" "$(outcome "$rc")" "$(tail -1 "$work/layout.txt")"
    else
      grep '^{' "$work/layout.txt" | while read -r line; do
        name=$(sed -n 's/.*"row":"\([^"]*\)".*/\1/p' <<<"$line")
        if grep -q '"status"' <<<"$line"; then
          row speed "$name" "$(sed -n 's/.*"status":"\([^"]*\)".*/\1/p' <<<"$line")" "$(sed -n 's/.*"note":"\([^"]*\)".*/\1/p' <<<"$line")"
        else
          # A layer's step row: the note splits NHWC into passes and conversions.
          how="above 1: channels-last is faster"
          [[ $name == *"with conversions"* ]] && how="$(sed -n 's/.*"note":"[^;]*; \([^"]*\)".*/\1/p' <<<"$line"); above 1: converting at the edges pays"
          row speed "$name" "$(field ratio <<<"$line")" \
            "NCHW $(field ours <<<"$line") ms, NHWC $(field baseline <<<"$line") ms; $how"
        fi
      done
    fi
  fi
}
wanted speed && speed_section
# The GPT rows (tools/gpu-check-gpt.sh).
gpt_section
((tests_failed)) || ! wanted sanitizer || sanitizer_section
finish
