# Shared helpers of the command-line tests (sourced). ctest sets DPTRAIN,
# DPTRAIN_SOURCE_DIR, MPIEXEC and PYTHON.
set -euo pipefail

: "${DPTRAIN:?run through ctest}"
: "${DPTRAIN_SOURCE_DIR:?run through ctest}"
MPIEXEC=${MPIEXEC:-mpiexec}
PYTHON=$("$DPTRAIN_SOURCE_DIR/tools/find-python.sh")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Tests start many short jobs on few cores: no busy-polling in MPI waits.
export OMPI_MCA_mpi_yield_when_idle=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# run NP TIMEOUT ARGS... : runs dptrain on NP ranks; sets RC, OUT, ERR.
# MPIEXEC_ARGS (an array) adds options to mpiexec.
MPIEXEC_ARGS=()
run() {
  local np=$1 limit=$2
  shift 2
  OUT=$WORK/out.txt
  ERR=$WORK/err.txt
  set +e
  timeout -k 5 "$limit" "$MPIEXEC" -n "$np" --oversubscribe "${MPIEXEC_ARGS[@]}" "$DPTRAIN" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  set -e
  if [[ $RC -eq 124 || $RC -eq 137 ]]; then
    cat "$ERR" >&2
    fail "dptrain $* on $np ranks did not finish within ${limit}s"
  fi
}

expect_rc() {
  local want=$1 what=$2
  if [[ $RC -ne $want ]]; then
    echo "--- stdout" >&2; tail -20 "$OUT" >&2
    echo "--- stderr" >&2; tail -20 "$ERR" >&2
    fail "$what: exit code $RC, expected $want"
  fi
}

# Exactly one "dptrain: error:" line on stderr, containing $1.
expect_one_error() {
  local n
  n=$(grep -c "dptrain: error:" "$ERR" || true)
  [[ $n -eq 1 ]] || { cat "$ERR" >&2; fail "expected one error line, got $n"; }
  grep -qF -- "$1" "$ERR" || { cat "$ERR" >&2; fail "error line does not mention '$1'"; }
}

# Sets torch_py to a python that imports torch and h5py, or ends the test
# as skipped (77): the PyTorch comparisons need one, CI may have none.
torch_python() {
  torch_py=""
  for py in "$PYTHON" /usr/bin/python3 python3; do
    if "$py" -c "import torch, h5py" 2>/dev/null; then torch_py=$py; break; fi
  done
  if [[ -z $torch_py ]]; then
    echo "SKIP: no python with torch and h5py (Debian: python3-torch python3-h5py)"
    exit 77
  fi
}

# random_tokens OUT VOCAB WIDTH TRAIN_ROWS TEST_ROWS SEED: a token set of
# uniformly drawn ids (uint16 rows of WIDTH, the vocab_size attribute), the
# train rows drawn first; TEST_ROWS 0: no test split.
random_tokens() {
  "$PYTHON" - "$@" <<'PY'
import sys, h5py, numpy as np
out, (vocab, width, n_train, n_test, seed) = sys.argv[1], map(int, sys.argv[2:])
rng = np.random.default_rng(seed)
with h5py.File(out, "w") as f:
    for name, n in (("train", n_train), ("test", n_test)):
        if n:
            rows = rng.integers(0, vocab, (n, width)).astype("uint16")
            f.create_dataset(name + "/tokens", data=rows).attrs["vocab_size"] = vocab
PY
}

synthetic() {  # synthetic OUT [make_synthetic.py options]
  local out=$1
  shift
  "$PYTHON" "$DPTRAIN_SOURCE_DIR/tools/make_synthetic.py" "$out" "$@" >/dev/null
}

# Pids of the dptrain ranks of the job whose command line contains $1, by rank.
rank_pid() {  # rank_pid MARKER RANK
  local pid
  for pid in $(pgrep -f -- "$1"); do
    [[ -r /proc/$pid/environ ]] || continue
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$DPTRAIN")" ]]; then
        echo "$pid"
        return 0
      fi
    fi
  done
  return 1
}

# Compares /model of two checkpoints: "exact" or a relative tolerance.
compare_models() {  # compare_models A B exact|TOL
  "$PYTHON" - "$@" <<'PY'
import sys, h5py, numpy as np
a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3]
with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
    names = sorted(fa["model"].keys())
    assert names == sorted(fb["model"].keys()), (names, sorted(fb["model"].keys()))
    worst = 0.0
    for n in names:
        for p in ("weight", "bias"):
            x, y = fa["model"][n][p][()], fb["model"][n][p][()]
            if tol == "exact":
                if not np.array_equal(x, y):
                    sys.exit(f"{n}/{p} differs: max abs diff {np.abs(x - y).max()}")
            else:
                worst = max(worst, float((np.abs(x - y) / (1e-3 + np.abs(y))).max()))
    if tol != "exact" and worst > float(tol):
        sys.exit(f"models differ: worst relative difference {worst} > {tol}")
PY
}

# Compares every tensor of /model and /optimizer of two checkpoints within
# TOL times the largest magnitude of that tensor in B (0: bit for bit).
close_state() {  # close_state A B TOL
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys, h5py, numpy as np
tol = float(sys.argv[3])
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    def names(f):
        out = []
        for g in ("model", "optimizer"):
            f[g].visititems(lambda n, o: out.append(g + "/" + n) if isinstance(o, h5py.Dataset) else None)
        return sorted(out)
    assert names(a) == names(b), (names(a), names(b))
    for n in names(a):
        x, y = a[n][()], b[n][()]
        diff = float(np.abs(x.astype(np.float64) - y).max())
        scale = float(np.abs(y).max()) or 1.0
        if (tol == 0 and not np.array_equal(x, y)) or diff > tol * scale:
            sys.exit(f"{n} differs: max abs diff {diff} (scale {scale}, tolerance {tol})")
PY
}

# Compares /model and /optimizer of two checkpoints bit for bit.
same_state() {  # same_state A B
  close_state "$1" "$2" 0
}
