# tools/convert_fashion_mnist.py started by a python3 that lacks h5py (a
# pyenv shim or a venv earlier on PATH, hiding Debian's python3 and its
# python3-h5py) runs itself again under tools/find-python.sh's python.
source "$(dirname "$0")/lib.sh"

# Tiny idx files in Fashion-MNIST's layout: 5 training and 3 test images.
"$PYTHON" - "$WORK/src" <<'PY'
import gzip, os, struct, sys
src = sys.argv[1]
os.makedirs(src)
for stem, n in (("train", 5), ("t10k", 3)):
    with gzip.open(os.path.join(src, f"{stem}-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(range(n)) * 784)
    with gzip.open(os.path.join(src, f"{stem}-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(i % 10 for i in range(n)))
PY

# A python3 first on PATH that cannot import h5py.
"$PYTHON" -m venv --without-pip "$WORK/venv" || fail "python3 -m venv --without-pip"
if PATH="$WORK/venv/bin:$PATH" python3 -c "import h5py" 2>/dev/null; then
  fail "the venv's python3 imports h5py: this test needs one that does not"
fi
PATH="$WORK/venv/bin:$PATH" python3 "$DPTRAIN_SOURCE_DIR/tools/convert_fashion_mnist.py" \
  --src "$WORK/src" "$WORK/out.h5" >"$WORK/convert.out" 2>&1 ||
  { cat "$WORK/convert.out"; fail "converter under a python3 without h5py"; }
"$DPTRAIN" inspect "$WORK/out.h5" >"$WORK/inspect.out" || fail "dptrain inspect of the converted file"
grep -q "set train: N = 5$" "$WORK/inspect.out" && grep -q "set test: N = 3$" "$WORK/inspect.out" ||
  { cat "$WORK/inspect.out"; fail "expected /train of 5 and /test of 3 images"; }
echo PASS
