# Tests: tools/gpu-check.sh whole against stand-ins for what a sandboxed GPU
# machine does, in seconds and without a GPU, a namespace or the CUDA
# build: a bundle folder of stand-in programs (shell scripts that print
# what gtest, dptrain and dptrain_bench print, and one ELF program linking
# cuBLAS), the bundle's dptrain_libprobe, stub cuBLAS/cuDNN/NCCL
# libraries, an orterun that fails without a synthetic hwloc topology
# (older gVisor) and prints a benign "error" line at exit 0, a
# python3 on the PATH that cannot import torch beside a ~/.venv whose
# stand-in torch cannot be imported under the bundle's library path, and a
# stale cuBLAS in a folder searched before the right one. Each run checks
# the table and what --out leaves behind; the last runs the one command
# line of docs/gpu.md against a tarball of the stand-in bundle.
: "${DPTRAIN_SOURCE_DIR:?run through ctest}"
source "$DPTRAIN_SOURCE_DIR/tests/cli/lib.sh"
src=$DPTRAIN_SOURCE_DIR
command -v cc >/dev/null || { echo "no C compiler: skipped"; exit 77; }

# --- pick_version: the version the bundle was built against, else the nearest ----------
row() { :; }
# shellcheck source=tools/gpu-check-env.sh
. "$src/tools/gpu-check-env.sh"
pick() { pick_version "$1" <<<"$2"; }
lines=$'13.0.0 /a\n13.2.5 /b\n13.1.0 /c\n14.0.1 /d'
[[ $(pick 13.2.5 "$lines") == "13.2.5 /b" ]] || fail "exact version not picked"
[[ $(pick 13.2.9 "$lines") == "13.2.5 /b" ]] || fail "same major.minor not picked"
[[ $(pick 13.1.7 "$lines") == "13.1.0 /c" ]] || fail "same major.minor not picked over a newer minor"
[[ $(pick 13.0.5 "$lines") == "13.0.0 /a" ]] || fail "13.0.0 is 13.0.5's major.minor"
[[ $(pick 12.9.0 "$lines") == "13.0.0 /a" ]] || fail "the oldest newer not picked: $(pick 12.9.0 "$lines")"
[[ $(pick 15.0.0 "$lines") == "14.0.1 /d" ]] || fail "the newest older not picked"
[[ $(pick "" "$lines") == "13.0.0 /a" ]] || fail "without a built version, the first folder"
[[ -z $(pick 13.0.0 "") ]] || fail "nothing found, nothing picked"
[[ $(pick 13.1.0 $'unreadable /u\n13.0.0 /a') == "13.0.0 /a" ]] || fail "a version not read was picked"
[[ $(pick 13.1.0 $'unreadable /u\nunreadable /v') == "unreadable /u" ]] || fail "no version read: not the first folder"

# --- the stand-ins ---------------------------------------------------------------------
B=$WORK/bundle S=$WORK/standin
mkdir -p "$B/bin" "$B/lib" "$B/data" "$S/bin" "$S/stale" "$S/right" "$WORK/home"
touch "$B/data/synthetic.h5" "$B/data/gpt_text.h5"
bash "$src/tools/gpu-bundle.sh" --probe "$B/bin/dptrain_libprobe"
stub() {  # stub DIR SONAME C-SOURCE [LINK ARGS]: a shared library
  local dir=$1 soname=$2 code=$3
  shift 3
  printf '%s\n' "$code" >"$WORK/stub.c"
  cc -shared -fPIC -o "$dir/$soname" "$WORK/stub.c" -Wl,-soname,"$soname" "$@"
}
prop() { echo "int cublasGetProperty(int t, int *v) { *v = t == 0 ? $1 : t == 1 ? $2 : $3; return 0; }"; }
stub "$S/stale" libcublasLt.so.13 'int cublasLtStale(void) { return 0; }'
stub "$S/stale" libcublas.so.13 "$(prop 13 0 0)"
stub "$S/right" libcublasLt.so.13 'int cublasLtRight(void) { return 0; }'
stub "$S/right" libcublas.so.13 "$(prop 13 2 5) int cublasGemmEx(void) { return 0; }"
stub "$S/right" libcudnn.so.9 '#include <stddef.h>
size_t cudnnGetVersion(void) { return 95000; }'
stub "$S/right" libcudnn_cnn.so.9 'int cudnn_cnn(void) { return 0; }'
stub "$S/right" libnccl.so.2 'int ncclGetVersion(int *v) { *v = 29900; return 0; }'
# A cuDNN sub-library that needs what the machine lacks (the bad run only).
stub "$S" libstandin_missing.so 'int missing(void) { return 0; }'
mkdir -p "$S/badcudnn"
cp "$S/right"/* "$S/badcudnn/"
stub "$S/badcudnn" libcudnn_ops.so.9 'int cudnn_ops(void) { return 0; }' -L"$S" -Wl,--no-as-needed -l:libstandin_missing.so
# The program that uses a cuBLAS function the stale library lacks.
echo 'int cublasGemmEx(void); int main(void) { return cublasGemmEx(); }' >"$WORK/prog.c"
cc -o "$B/bin/needs_cublas" "$WORK/prog.c" -L"$S/right" -l:libcublas.so.13

cat >"$B/bin/gpu_tests" <<'EOF'
#!/bin/bash
# Stands in for gpu_tests: STANDIN_LIST=ok|fail|hang for its test listing;
# STANDIN_TESTS=cascade: Breaks fails, Later fails after it in the whole
# run only (as after a sticky CUDA error), Crashes aborts the process.
if [[ $1 == --gtest_list_tests ]]; then
  case ${STANDIN_LIST:-ok} in
    fail) echo "[standin:00001] PMIX ERROR: stand-in MPI_Init failure in the first real launch" >&2; exit 1 ;;
    hang) exec sleep 600 ;;
  esac
  [[ ${STANDIN_TESTS:-} == cascade ]] && { printf 'Standin.\n  Passes\n  Breaks\n  Later\n  Crashes\n  AlsoPasses\n'; exit 0; }
  printf 'Standin.\n  Passes\n  AlsoPasses\n'
  exit 0
fi
filter='*' tests='Passes AlsoPasses'
for a in "$@"; do [[ $a == --gtest_filter=* ]] && filter=${a#--gtest_filter=}; done
[[ ${STANDIN_TESTS:-} == cascade ]] && tests='Passes Breaks Later Crashes AlsoPasses'
broken=0
for t in $tests; do
  matched=0 positive=${filter%%-*} negative=
  [[ $filter == *-* ]] && negative=${filter#*-}
  IFS=: read -ra patterns <<<"$positive"
  for p in "${patterns[@]}"; do [[ Standin.$t == $p ]] && matched=1; done
  IFS=: read -ra patterns <<<"$negative"
  for p in "${patterns[@]}"; do [[ Standin.$t == $p ]] && matched=0; done
  ((matched)) || continue
  printf '[ RUN      ] Standin.%s\n' $t
  case $t in
    Breaks) broken=1 ;&
    Later)
      if ((broken)); then
        printf 'test_standin.cpp:7: Failure\nExpected: the stand-in result\n[  FAILED  ] Standin.%s (1 ms)\n' $t
        continue
      fi ;;
    Crashes) echo "stand-in abort" >&2; exit 134 ;;
  esac
  printf '[       OK ] Standin.%s (1 ms)\n' $t
done
exit $broken
EOF
cat >"$B/bin/dptrain" <<'EOF'
#!/bin/bash
# Stands in for dptrain train: the metrics lines that gpu-check.sh reads.
steps=20 every=1 metrics=/dev/null
while (($#)); do
  case $1 in --steps) steps=$2 ;; --log-every) every=$2 ;; --metrics) metrics=$2 ;; esac
  shift
done
: >"$metrics"
for ((s = every; s <= steps; s += every)); do
  echo "{\"event\":\"train\",\"step\":$s,\"loss\":$(awk -v s="$s" 'BEGIN {print 2.3 / s}'),\"samples_per_s\":1000,\"ms\":{\"data\":0.1,\"forward\":0.4,\"backward\":0.5}}" >>"$metrics"
done
echo '{"event":"summary","samples_per_s":1000}' >>"$metrics"
EOF
cat >"$B/bin/dptrain_bench" <<'EOF'
#!/bin/bash
# Stands in for dptrain_bench: its modes, and one row for gemm and cnn.
case $1 in
  --help) echo "modes: gemm cnn" ;;
  gemm | cnn) echo "{\"row\":\"$1 stand-in row\",\"ours\":1.0,\"baseline\":0.9,\"ratio\":0.9,\"target\":\">= 0.85\"}" ;;
esac
EOF
printf '#!/bin/sh\nexit 0\n' >"$B/bin/dptrain_nccl_rate"
printf '#!/bin/sh\nexit 0\n' >"$B/bin/dptrain_conv_layout"
chmod +x "$B"/bin/*

cat >"$S/bin/orterun" <<'EOF'
#!/bin/bash
# Stands in for a sandbox's orterun: without a synthetic topology hwloc
# fails (STANDIN_TOPOLOGY=broken); with one it prints a benign warning
# that says "error", exits as its program does, and logs every launch.
[[ $1 == --version ]] && { echo "orterun (Open MPI) 4.1.4"; exit 0; }
bind=
while [[ $1 == -* ]]; do
  case $1 in -n | -np) shift 2 ;; --bind-to) bind=$2; shift 2 ;; *) shift ;; esac
done
echo "bind=$bind synthetic=${HWLOC_SYNTHETIC:-} prog=${1##*/} LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$STANDIN_LOG"
if [[ ${STANDIN_TOPOLOGY:-} == broken && -z ${HWLOC_SYNTHETIC:-} ]]; then
  echo "[hwloc/linux] failed to find sysfs cpu topology directory, aborting linux discovery." >&2
  echo "orte_init failed" >&2
  exit 1
fi
echo "WARNING: a stand-in warning. This error message means nothing went wrong." >&2
exec "$@"
EOF
cat >"$S/bin/compute-sanitizer" <<'EOF'
#!/bin/bash
# Stands in for NVIDIA's compute-sanitizer: runs the program, then reports
# as the real one does. STANDIN_SANITIZER=clean (memcheck counts one CUDA
# API error, as a library probing makes), race (racecheck reports one) or
# unsupported (the device is refused, nothing runs).
tool=memcheck code=0
while [[ $1 == --* ]]; do
  case $1 in --tool) tool=$2 ;; --error-exitcode) code=$2 ;; esac
  shift 2
done
echo "========= COMPUTE-SANITIZER"
if [[ ${STANDIN_SANITIZER:-clean} == unsupported ]]; then
  echo "========= Error: Device not supported"
  exit 1
fi
"$@"
rc=$?
case $tool:${STANDIN_SANITIZER:-clean} in
  memcheck:*)
    echo "========= Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to cudaFuncGetAttributes."
    echo "========= ERROR SUMMARY: 1 error"; exit "$code" ;;
  racecheck:race)
    echo "========= Error: Race reported between Write access at void standin_kernel()+0x1b0 in standin.cu:16"
    echo "=========     and Read access at void standin_kernel()+0x2c0 in standin.cu:20 [4 hazards]"
    echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit "$code" ;;
  racecheck:*) echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ;;
  *) echo "========= ERROR SUMMARY: 0 errors" ;;
esac
exit $rc
EOF
cat >"$S/bin/nvidia-smi" <<'EOF'
#!/bin/sh
# Stands in for the driver's tool: one GPU.
if [ "$1" = -L ]; then echo "GPU 0: stand-in GPU (UUID: GPU-standin)"; else echo "stand-in GPU, 580.00, 143771 MiB"; fi
EOF
# PATH's python3 cannot import torch; ~/.venv's can, outside the bundle's library path.
mkdir -p "$S/notorch/torch" "$S/torch/torch" "$WORK/home/.venv/bin"
echo 'raise ImportError("stand-in: no torch for this python3")' >"$S/notorch/torch/__init__.py"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$S/notorch" "$PYTHON" >"$S/bin/python3"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$S/torch" "$PYTHON" >"$WORK/home/.venv/bin/python"
cat >"$S/torch/torch/__init__.py" <<EOF
# Stands in for PyTorch: its import fails under the bundle's library path.
import os
if "$B/lib" in os.environ.get("LD_LIBRARY_PATH", ""):
    raise ImportError("stand-in: libssl from the bundle is older than the image's")
__version__ = "0.0+standin"
class cuda:
    @staticmethod
    def is_available():
        return False
EOF
chmod +x "$S/bin"/* "$WORK/home/.venv/bin/python"

manifest() {  # manifest CUBLAS-VERSION
  printf 'glibc=%s\ncommit=standin\ncublas=%s\ncudnn=9.50.0\nnccl=2.99.0\n' \
    "$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)" "$1" >"$B/MANIFEST"
}
# check NAME [VAR=VALUE...]: the check on the stand-ins, --out WORK/NAME;
# sets RC, T (its table) and OUTDIR.
check() {
  local name=$1
  shift
  OUTDIR=$WORK/$name T=$WORK/$name.console
  set +e
  env -u PYTHONPATH -u VIRTUAL_ENV -u CONDA_PREFIX -u DPTRAIN_TORCH_PYTHON -u NCCL_DEBUG \
    HOME="$WORK/home" PATH="$S/bin:$PATH" BUNDLE="$B" STEPS=16 BUDGET_S=120 SANITIZE_FILTER='Standin.*' \
    STANDIN_LOG="$WORK/$name.launches" DPTRAIN_CUDA_LIB_DIRS="$S/stale:$S/right" "$@" \
    timeout -k 5 200 bash "$src/tools/gpu-check.sh" --out "$OUTDIR" >"$T" 2>"$WORK/$name.err"
  RC=$?
  set -e
}
has() { grep -qF -- "$1" "$T" || { cat "$T" "$WORK/$2.err" >&2; fail "$2: no table row with: $1"; }; }

# 1. The sandbox: broken topology, torch in ~/.venv only, a stale cuBLAS first.
manifest 13.2.5
check sandbox STANDIN_TOPOLOGY=broken
[[ $RC -eq 0 ]] || { cat "$T" "$WORK/sandbox.err" >&2; fail "sandbox: gpu-check exit $RC, want 0"; }
has "| setup | PyTorch | torch 0.0+standin | $WORK/home/.venv/bin/python |" sandbox
has "| setup | CUDA libraries | found | cublas 13.2.5 (built with 13.2.5) from $S/right; cudnn 9.50.0 (built with 9.50.0) from $S/right; nccl 2.99.0 (built with 2.99.0) from $S/right |" sandbox
has "| setup | ldd (-r: every symbol of the programs; all libraries, plugins) | ok |" sandbox
has "| setup | cuDNN sub-libraries (dlopen) | ok | 2 load: libcudnn.so.9 libcudnn_cnn.so.9 |" sandbox
has "| setup | smoke launch (orterun -n 1 true) | ok | Open MPI 4.1.4; on the machine's topology exit 1 (logs/smoke.txt), on a synthetic one (HWLOC_SYNTHETIC=\"package:1 core:" sandbox
has "| tests (1 rank) | Standin.Passes | passed |" sandbox
has "| speed | fp32 step: dptrain vs PyTorch eager | skipped | dptrain 128.000 ms; PyTorch sees no GPU |" sandbox
# The sanitizer last (no test failed): each tool clean over the two tests,
# memcheck's CUDA API error counted apart.
has "| sanitizer | memcheck (SANITIZE_FILTER Standin.*) | clean | 0 errors in 2 tests; CUDA API calls that returned an error: 1 (logs/sanitizer-memcheck.txt) |" sandbox
has "| sanitizer | racecheck (SANITIZE_FILTER Standin.*) | clean | 0 errors in 2 tests |" sandbox
has "| sanitizer | synccheck (SANITIZE_FILTER Standin.*) | clean | 0 errors in 2 tests |" sandbox
[[ $(grep '^| [a-z]' "$T" | tail -3 | cut -d'|' -f2) == $' sanitizer \n sanitizer \n sanitizer ' ]] ||
  fail "sandbox: the sanitizer's rows are not last: $(grep '^| [a-z]' "$T" | tail -4)"
grep -q '| \(FAILED\|TIMED OUT\|NOT FOUND\|not run\)' "$T" && fail "sandbox: rows that did not pass: $(grep '| \(FAILED\|TIMED OUT\|NOT FOUND\|not run\)' "$T")"
# Every launch after the smoke launch's first try kept the synthetic
# topology, and every launch was the real runs' (--bind-to none).
launches=$WORK/sandbox.launches
[[ $(head -1 "$launches") == "bind=none synthetic= prog=true "* ]] || fail "the first smoke launch: $(head -1 "$launches")"
[[ $(grep -c 'synthetic= ' "$launches") -eq 1 ]] || fail "launches without the synthetic topology: $(grep 'synthetic= ' "$launches")"
[[ $(grep -vc '^bind=none ' "$launches") -eq 0 ]] || fail "launches not as the real runs: $(grep -v '^bind=none ' "$launches")"
# What --out holds: the table as it ended, the rows, every step's log, the environment.
grep -q '^_finished: exit 0 after [0-9]* s_$' "$OUTDIR/table.md" || fail "table.md does not say how the check ended"
grep -qF "| setup | PyTorch | torch 0.0+standin |" "$OUTDIR/table.md" || fail "table.md lacks the rows"
[[ $(wc -l <"$OUTDIR/rows.tsv") -eq $(($(grep -c '^| [a-z]' "$T") - 1)) ]] || fail "rows.tsv is not the table"
for f in smoke.txt smoke-synthetic.txt test-list.txt test-list.err tests1.txt fp32.jsonl cpu-ref.out \
  gemm-fp32.txt torch.tsv notes.txt env-start.txt env-check.txt machine.txt python.txt cuda-libs.txt ldd.txt \
  cudnn-dlopen.txt; do
  [[ -e $OUTDIR/logs/$f ]] || fail "no logs/$f in the output folder: $(ls "$OUTDIR/logs")"
done
grep -q "failed to find sysfs cpu topology" "$OUTDIR/logs/smoke.txt" || fail "logs/smoke.txt lacks the first launch's output"
grep -q "^HWLOC_HIDE_ERRORS=2$" "$OUTDIR/logs/env-check.txt" || fail "HWLOC_HIDE_ERRORS is not 2"
grep -q "^HWLOC_PLUGINS_PATH=" "$OUTDIR/logs/env-check.txt" || fail "the image's hwloc plugins are not kept out"
for v in PMIX_MCA_gds=hash OMPI_MCA_btl_vader_single_copy_mechanism=none NCCL_DEBUG=WARN; do
  grep -qx "$v" "$OUTDIR/logs/env-check.txt" || fail "the runs do not have $v"
done
grep -q "^LD_LIBRARY_PATH=.*$B/lib" "$OUTDIR/logs/env-start.txt" && fail "env-start.txt is not the environment as started"
grep -q "stand-in GPU, 580.00" "$OUTDIR/logs/machine.txt" || fail "machine.txt lacks nvidia-smi"
grep -q "^$S/bin/python3: cannot import torch" "$OUTDIR/logs/python.txt" || fail "python.txt lacks the python3 without torch"
grep -q "^13.0.0 $S/stale$" "$OUTDIR/logs/cuda-libs.txt" || fail "cuda-libs.txt lacks the stale cuBLAS"

# 2. Only the stale cuBLAS, and the bundle built against it: plain ldd is
# satisfied, ldd -r names the function it lacks, and the check stops.
manifest 13.0.0
check stale DPTRAIN_CUDA_LIB_DIRS="$S/stale"
[[ $RC -eq 1 ]] || fail "stale: gpu-check exit $RC, want 1"
has "| setup | ldd (-r: every symbol of the programs; all libraries, plugins) | FAILED | undefined symbols: cublasGemmEx (needs_cublas) |" stale
grep -q '^_finished: exit 1 ' "$OUTDIR/table.md" || fail "stale: table.md does not say how it ended"

# 3. The first real MPI_Init fails: its stderr in the row, on the console
# and in the logs; a cuDNN sub-library that does not load is named, and
# the check goes on.
manifest 13.2.5
check listing STANDIN_LIST=fail STANDIN_SANITIZER=unsupported DPTRAIN_CUDA_LIB_DIRS="$S/badcudnn"
[[ $RC -eq 1 ]] || fail "listing: gpu-check exit $RC, want 1"
grep -q '^| tests | gpu_tests --gtest_list_tests | FAILED (exit 1) | exit 1, 0 test names; stderr: .*PMIX ERROR: stand-in MPI_Init failure' "$T" ||
  fail "listing: the row does not show the listing's stderr: $(grep 'gtest_list_tests' "$T")"
has "| setup | cuDNN sub-libraries (dlopen) | FAILED | libcudnn_ops.so.9: libstandin_missing.so: cannot open shared object file" listing
has "| training | 1 GPU fp32, 16 steps | ok |" listing
grep -q "stand-in MPI_Init failure" "$WORK/listing.err" || fail "the listing's stderr is not on the console"
grep -q "stand-in MPI_Init failure" "$OUTDIR/logs/test-list.err" || fail "the listing's stderr is not in the logs"
has "| sanitizer | memcheck (SANITIZE_FILTER Standin.*) | skipped | Error: Device not supported |" listing
[[ $(grep -c '^| sanitizer |' "$T") -eq 1 ]] || fail "listing: the other tools were tried on a device the first refused"

# 4. Tests that fail: each runs again alone, which tells a failure of its
# own (Breaks; Crashes, which aborts the process) from one that an earlier
# test caused (Later; AlsoPasses, never reached); then the sanitizer, right
# after the tests: a race is a failure, a pattern that matches no test too.
manifest 13.2.5
check cascade STANDIN_TESTS=cascade STANDIN_SANITIZER=race SANITIZE_FILTER='Standin.Passes:Nothing.*' \
  DPTRAIN_CUDA_LIB_DIRS="$S/right"
[[ $RC -eq 1 ]] || fail "cascade: gpu-check exit $RC, want 1"
has "| tests (1 rank) | Standin.Passes | passed |" cascade
has "| tests (1 rank) | Standin.Breaks | FAILED | (1 ms) |" cascade
has "| tests (1 rank) | Standin.Later | FAILED |" cascade
has "| tests (1 rank) | Standin.AlsoPasses | FAILED (exit 134) |" cascade
has "| tests alone (1 rank) | Standin.Breaks | FAILED | test_standin.cpp:7: Failure Expected: the stand-in result" cascade
has "| tests alone (1 rank) | Standin.Later | passed | passes alone: in the whole run an earlier test left the process broken (the first to fail there: Standin.Breaks) (logs/alone1-Standin.Later.txt) |" cascade
has "| tests alone (1 rank) | Standin.Crashes | FAILED (exit 134) |" cascade
has "| tests alone (1 rank) | Standin.AlsoPasses | passed |" cascade
[[ $(grep -c '^| tests alone' "$T") -eq 4 ]] || fail "cascade: not 4 tests alone: $(grep '^| tests alone' "$T")"
grep -q "Standin.Passes" "$OUTDIR/logs/alone1-Standin.Breaks.txt" && fail "cascade: Breaks did not run alone"
has "| sanitizer | racecheck (SANITIZE_FILTER Standin.Passes:Nothing.*) | FAILED | 1 errors in 1 tests; the first: Error: Race reported between Write access at void standin_kernel()+0x1b0 in standin.cu:16 and Read access at" cascade
has "| sanitizer | memcheck (SANITIZE_FILTER Standin.Passes:Nothing.*) | FAILED | no test matched: Nothing.* |" cascade
sanitizer_at=$(grep -n -m1 '^| sanitizer |' "$T" | cut -d: -f1)
training_at=$(grep -n -m1 '^| training |' "$T" | cut -d: -f1)
((sanitizer_at < training_at)) || fail "cascade: the sanitizer did not run right after the tests"

# 5. The first real MPI_Init hangs: a time limit, not the whole budget.
SECONDS=0
check hang STANDIN_LIST=hang BUDGET_S=20
[[ $RC -eq 1 ]] || fail "hang: gpu-check exit $RC, want 1"
((SECONDS < 90)) || fail "hang: the check took $SECONDS s"
has "| sanitizer | memcheck (SANITIZE_FILTER Standin.*) | skipped | the 20-second budget was spent before it (ONLY=sanitizer runs it alone) |" hang
has "| tests | gpu_tests --gtest_list_tests | TIMED OUT |" hang

# 6. The one command line of docs/gpu.md, on a tarball of the stand-in bundle.
line=$(awk '/^<!-- the one command line -->$/ {getline; getline; print; exit}' "$src/docs/gpu.md")
[[ -n $line ]] || fail "no command line after '<!-- the one command line -->' in docs/gpu.md"
((${#line} <= 2000)) || fail "the command line has ${#line} characters, over 2,000"
mkdir -p "$B/tools" "$WORK/carried/.gpu-bundle"
cp "$src"/tools/gpu-check.sh "$src"/tools/gpu-check-env.sh "$src"/tools/gpu-check-tests.sh "$src"/tools/gpu-check-gpt.sh \
  "$src"/tools/gpu-check-torch.py "$src"/tools/gpu-check-kernels.py "$B/tools/"
tar -C "$B" -czf "$WORK/carried/.gpu-bundle/dptrain-gpu.tar.gz" .
set +e
(cd "$WORK/carried" && env -u BUNDLE HOME="$WORK/home" PATH="$S/bin:$PATH" STEPS=16 STANDIN_LOG="$WORK/line.launches" \
  SANITIZE_FILTER='Standin.*-Standin.AlsoPasses' \
  DPTRAIN_CUDA_LIB_DIRS="$S/right" OUT="$WORK/line" timeout -k 5 200 bash -c "$line" >"$WORK/line.console" 2>&1)
set -e
console=$WORK/line/gpu-check/console.txt
[[ -f $console ]] || { cat "$WORK/line.console"; fail "no console.txt in the output folder"; }
grep -qx "gpu-check exit 0" "$console" || { tail -30 "$console"; fail "the command line: the check did not exit 0"; }
grep -qF "| tests (1 rank) | Standin.Passes | passed |" "$WORK/line/gpu-check/table.md" || fail "the command line: no table.md"
[[ -s $WORK/line/gpu-check/logs/tests1.txt ]] || fail "the command line: no logs"
# A gtest filter with a negative part (as the sanitizer's defaults have):
# the test it leaves out is not run, and not missed.
grep -qF "| sanitizer | memcheck (SANITIZE_FILTER Standin.*-Standin.AlsoPasses) | clean | 0 errors in 1 tests" \
  "$WORK/line/gpu-check/table.md" || fail "the command line: the sanitizer's negative filter: $(grep '| sanitizer |' "$WORK/line/gpu-check/table.md")"
cmp -s "$console" "$WORK/line.console" || fail "console.txt is not what the console showed"
echo "PASS: gpu-check on the stand-ins: sandbox, stale cuBLAS, listing failed and hung, failing tests, the ${#line}-character command line"
