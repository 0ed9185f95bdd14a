# The CPU backend's threads and precision as a user meets them: the OpenMP
# team is the --threads of each rank (and the default gives two ranks of a
# two-core machine one thread each, not one per core); a rank bound to fewer
# CPUs than its threads is warned about; --precision bf16 trains where the
# CPU has bf16 instructions and is a usage error elsewhere (exit 2; each
# rank names what its CPU lacks, since nodes may differ); tf32 is refused.
source "$(dirname "$0")/lib.sh"

# Every one of NP ranks reports the error, naming $2.
expect_error_on_every_rank() {  # NP TEXT
  local n
  n=$(grep -c "dptrain: error: \[rank [0-9]*\] .*$2" "$ERR" || true)
  [[ $n -eq $1 ]] || { cat "$ERR" >&2; fail "expected $1 rank errors naming '$2', got $n"; }
}

data=$DPTRAIN_SOURCE_DIR/data/samples/fashion_mnist_2k.h5
args=(train --data "$data" --model dense:64,relu,dense:10 --batch-size 50 --epochs 1
      --device cpu --seed 3)
cores=$(nproc)

# 1. Explicit --threads 2 on a rank that has two CPUs: a team of two, no warning.
MPIEXEC_ARGS=(--bind-to none)
run 1 120 "${args[@]}" --threads 2
expect_rc 0 "--threads 2, unbound"
grep -q "GEMM .*, 2 OpenMP thread(s)" "$OUT" || { cat "$OUT"; fail "no team of 2 in the summary"; }
grep -q WARNING "$OUT" && { cat "$OUT"; fail "warning although the rank has the CPUs"; }

# 2. The same rank bound to one core: warned, with the way out.
MPIEXEC_ARGS=(--bind-to core)
run 1 120 "${args[@]}" --threads 2
expect_rc 0 "--threads 2 bound to one core"
grep -q "WARNING: rank(s) 0 run 2 threads on 1 CPU(s) of their affinity mask" "$OUT" ||
  { cat "$OUT"; fail "no binding warning for 2 threads on 1 core"; }

# 3. The default on two unbound ranks: the CPUs they share, split between them.
MPIEXEC_ARGS=(--bind-to none)
run 2 120 "${args[@]}"
expect_rc 0 "default threads on 2 ranks"
want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
grep -q "$want thread(s)/rank" "$OUT" && grep -q "GEMM .*, $want OpenMP thread(s)" "$OUT" ||
  { cat "$OUT"; fail "default threads on 2 ranks of $cores cores: expected $want each"; }

MPIEXEC_ARGS=()

# 4. bf16: trains where the instructions are, a usage error elsewhere.
if grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo; then
  run 2 300 "${args[@]}" --precision bf16
  expect_rc 0 "--precision bf16 on a CPU with bf16 instructions"
  grep -q "bf16 inputs, fp32 accumulation" "$OUT" || { cat "$OUT"; fail "bf16 not in the summary"; }
else
  run 2 120 "${args[@]}" --precision bf16
  expect_rc 2 "--precision bf16 without bf16 instructions"
  expect_error_on_every_rank 2 "AVX512_BF16 or AMX"
fi

# 5. tf32 is a GPU format.
run 2 120 "${args[@]}" --precision tf32
expect_rc 2 "--precision tf32 on the CPU"
expect_error_on_every_rank 2 "needs --device cuda"
echo "PASS"
