# tools/convert_text.py: text files to a byte-level token set (docs/design.md
# section 3): windows of T+1 bytes overlapping by one, the test set the held-out
# tail of the stream, binary files and symlinked duplicates skipped, and the
# input errors (exit 2, naming the file).
source "$(dirname "$0")/lib.sh"
convert=$DPTRAIN_SOURCE_DIR/tools/convert_text.py

# A corpus of a few KB in a folder: text with non-ASCII UTF-8 and a fortune-style
# overstrike, one file without a final newline, one in a subfolder, a binary
# index, a symlink to a file already read, an empty file.
"$PYTHON" - "$WORK/corpus" <<'PY'
import os, random, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "sub"))
rng = random.Random(7)
words = ["dptrain", "byte", "window", "fortune", "caf\u00e9", "na\u00efve", "_\bx", "%", "tokens"]
def text(n):
    return "".join(rng.choice(words) + rng.choice(" \n") for _ in range(n)).encode()
open(os.path.join(root, "a.txt"), "wb").write(text(300) + b"\n")
open(os.path.join(root, "b.txt"), "wb").write(text(200).rstrip(b"\n") + b"end of b")
open(os.path.join(root, "sub", "c.txt"), "wb").write(text(250) + b"\n")
open(os.path.join(root, "a.dat"), "wb").write(bytes([0, 0, 0, 2]) + bytes(range(256)) * 4)
open(os.path.join(root, "empty"), "wb").close()
os.symlink("a.txt", os.path.join(root, "a.link"))
PY

"$PYTHON" "$convert" "$WORK/corpus" --output "$WORK/out/tokens.h5" --window 16 --test-fraction 0.1 \
  >"$WORK/convert.out" 2>&1 || { cat "$WORK/convert.out"; fail "converter on the corpus"; }
grep -q "read 3 files" "$WORK/convert.out" && grep -q "1 not text" "$WORK/convert.out" &&
  grep -q "1 duplicate" "$WORK/convert.out" && grep -qF "$WORK/out/tokens.h5" "$WORK/convert.out" ||
  { cat "$WORK/convert.out"; fail "summary: expected 3 files read, 1 not text, 1 duplicate, the output path"; }

"$PYTHON" - "$WORK/corpus" "$WORK/out/tokens.h5" <<'PY' || fail "token set content"
import os, sys, h5py, numpy as np
root, out = sys.argv[1], sys.argv[2]
read = lambda name: open(os.path.join(root, name), "rb").read()
# Sorted by path: a.link (= a.txt, so a.txt itself is the duplicate), b.txt
# (no final newline: one is added), sub/c.txt.
stream = read("a.txt") + read("b.txt") + b"\n" + read("sub/c.txt")
T = 16
cut = len(stream) - round(len(stream) * 0.1)
with h5py.File(out, "r") as f:
    assert sorted(f.keys()) == ["test", "train"], list(f.keys())
    for name, part in (("train", stream[:cut]), ("test", stream[cut:])):
        ds = f[name]["tokens"]
        n = (len(part) - 1) // T
        assert ds.dtype == np.uint8, (name, ds.dtype)
        assert ds.shape == (n, T + 1), (name, ds.shape, n)
        assert int(ds.attrs["vocab_size"]) == 256, (name, dict(ds.attrs))
        rows = ds[()]
        # Row i's last byte is row i+1's first: the windows overlap by one.
        assert (rows[:-1, -1] == rows[1:, 0]).all(), name
        # The windows spell the set's own part of the stream from its first byte.
        joined = bytes(rows[0]) + bytes(rows[1:, 1:].ravel())
        assert joined == part[:n * T + 1], name
    # The test windows hold only the tail: none reaches back into training text.
    test = bytes(f["test/tokens"][0])
    assert test == stream[cut:cut + T + 1], (test, stream[cut - 4:cut + T + 1])
    assert f["train/tokens"].shape[0] * T + 1 <= cut
    assert any(b >= 128 for b in f["train/tokens"][()].ravel()), "non-ASCII bytes lost"
PY

# expect_exit2 WHAT TEXT ARGS...: the converter exits 2 with TEXT in its message.
expect_exit2() {
  local what=$1 text=$2
  shift 2
  set +e
  "$PYTHON" "$convert" "$@" >"$WORK/err.out" 2>&1
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || { cat "$WORK/err.out"; fail "$what: exit code $rc, expected 2"; }
  grep -qF -- "$text" "$WORK/err.out" || { cat "$WORK/err.out"; fail "$what: message does not mention '$text'"; }
  [[ ! -e $WORK/bad.h5 ]] || fail "$what: an output file was written"
}
mkdir "$WORK/none"
cp "$WORK/corpus/a.dat" "$WORK/none/"
expect_exit2 "a folder with no text files" "no text files found in $WORK/none" "$WORK/none" --output "$WORK/bad.h5"
expect_exit2 "a missing input" "$WORK/missing.txt: no such file" "$WORK/missing.txt" --output "$WORK/bad.h5"
printf 'forty bytes of text, far too few here.\n' >"$WORK/short.txt"
expect_exit2 "a corpus too short for a test window" "$WORK/short.txt" "$WORK/short.txt" --window 16 --output "$WORK/bad.h5"
expect_exit2 "--window 0" "--window 0" "$WORK/corpus" --window 0 --output "$WORK/bad.h5"
expect_exit2 "--test-fraction 1" "--test-fraction" "$WORK/corpus" --test-fraction 1 --output "$WORK/bad.h5"
echo PASS
