# The default --threads follows the CPUs each rank may run on (its affinity
# mask), split among the ranks of the node that share them: a rank bound to
# one core gets 1 thread, unbound ranks split the CPUs they all see.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 64 --val-n 8 --shape 4 --classes 2 --dtype float32 --seed 2
cpus=$(nproc)  # the CPUs this test may use, as mpiexec's ranks inherit them
threads_of() {  # threads_of NP MPIEXEC_OPTIONS...: the summary's threads per rank
  local np=$1
  shift
  MPIEXEC_ARGS=("$@")
  run "$np" 60 train --data "$WORK/d.h5" --model dense:2 --batch-size 8 --steps 1 --val-set "" --device cpu
  expect_rc 0 "mpiexec -n $np $*"
  grep -o "[0-9]* thread(s)/rank" "$OUT" | grep -o "^[0-9]*"
}

got=$(threads_of 1 --bind-to none)
[[ $got -eq $cpus ]] || fail "one unbound rank: $got threads, expected $cpus"
got=$(threads_of 2 --bind-to none)
want=$((cpus / 2 > 0 ? cpus / 2 : 1))
[[ $got -eq $want ]] || fail "two unbound ranks: $got threads each, expected $want"
got=$(threads_of 1 --bind-to core)
[[ $got -eq 1 ]] || fail "a rank bound to one core: $got threads, expected 1"
echo "PASS ($cpus CPUs)"
