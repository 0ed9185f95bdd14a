# OpenBLAS's kernel choice: when the library's pick is below what the CPU
# supports (its generic kernel where its model table does not know the CPU,
# or an older family's), dptrain re-executes itself once, before MPI starts,
# with the kernel the CPU supports, and the start-up summary says so; a
# user's OPENBLAS_CORETYPE is obeyed, with a warning when it is below the CPU.
source "$(dirname "$0")/lib.sh"
: "${OPENBLAS_UNKNOWN_CPU:?run through ctest}"

if [[ "${DPTRAIN_GEMM:-}" != openblas ]]; then
  echo "SKIP: this build's GEMMs run on ${DPTRAIN_GEMM:-?}, not OpenBLAS (cmake -DDPTRAIN_CPU_GEMM=openblas)"
  exit 77
fi

if ! grep -qw avx2 /proc/cpuinfo; then
  echo "SKIP: this CPU has no AVX2, so OpenBLAS's generic kernel is the right one"
  exit 0
fi
unset OPENBLAS_CORETYPE
if grep -qw avx512_bf16 /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then want=Cooperlake
elif grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then want=SkylakeX
else want=Haswell; fi

synthetic "$WORK/d.h5" --n 200 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 1
args=(train --data "$WORK/d.h5" --model dense:8,relu,dense:3 --batch-size 20 --epochs 1
      --device cpu --threads 1 --seed 3)

# 1. The library's own pick is generic: every rank re-executes with $want.
export LD_PRELOAD=$OPENBLAS_UNKNOWN_CPU
MPIEXEC_ARGS=(-x LD_PRELOAD)
run 2 120 "${args[@]}"
expect_rc 0 "training after the re-exec"
grep -q "GEMM OpenBLAS .*, $want kernel (chosen for this CPU's .*; the library's own pick was Prescott)" "$OUT" ||
  { cat "$OUT"; fail "summary does not show the re-exec to $want"; }
grep -q WARNING "$OUT" && { cat "$OUT"; fail "warning although the right kernel runs"; }

# 2. The user's choice is obeyed, with a warning.
OPENBLAS_CORETYPE=Prescott run 2 120 "${args[@]}"
expect_rc 0 "training with OPENBLAS_CORETYPE=Prescott"
grep -q "Prescott kernel (set by OPENBLAS_CORETYPE); WARNING: below this CPU's" "$OUT" ||
  { cat "$OUT"; fail "user's OPENBLAS_CORETYPE not obeyed or not warned about"; }
unset LD_PRELOAD

# 3. The library's own pick: left alone where it is at this CPU's level (no
# re-exec); raised to $want where the library knows the CPU only as an
# older one (Debian 12's 0.3.21 picks SkylakeX on some AVX512_BF16 CPUs).
run 1 120 "${args[@]}"
expect_rc 0 "training with the library's own pick"
grep -q WARNING "$OUT" && { cat "$OUT"; fail "warning although no OPENBLAS_CORETYPE was set"; }
line=$(grep "GEMM OpenBLAS" "$OUT" || true)
pick_re="the library's own pick was ([A-Za-z]+)\)"
if [[ $line =~ $pick_re ]]; then
  [[ ${BASH_REMATCH[1]} != "$want" ]] || { cat "$OUT"; fail "re-executed although the library's pick was $want"; }
  [[ $line == *", $want kernel (chosen for this CPU's "* ]] || { cat "$OUT"; fail "raised to another kernel than $want"; }
else
  [[ $line =~ GEMM\ OpenBLAS\ [0-9.]+,\ [A-Za-z]+\ kernel,\ [0-9]+\ OpenMP\ thread\(s\)$ ]] ||
    { cat "$OUT"; fail "unexpected GEMM line"; }
fi
echo PASS
