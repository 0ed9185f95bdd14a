#!/usr/bin/env python3
# Implements: text files to a dptrain byte-level token set (docs/design.md
# section 3): /train/tokens and /test/tokens, uint8 [N, T+1], vocab_size 256.
"""Convert text files to a byte-level token set for dptrain's language models.

The inputs (files, or folders: every regular file under them, sorted by path)
are concatenated in order, with a newline between two files where the first
does not end in one. The test set is the held-out tail of that stream
(--test-fraction), cut at a byte before windowing, so no test window holds
training text. Each set is cut into windows of T+1 bytes, window i starting
at byte i*T: consecutive windows share one byte, every byte after the first is
a target exactly once, and the last (stream length - 1) mod T bytes, too few
for a window, are dropped.

Files that are not text (a NUL byte, or more than 10% control bytes: the
binary .dat indexes next to fortune's files, say) are skipped, and so is a
file met again through a symbolic link. Debian's fortunes:
  python3 tools/convert_text.py /usr/share/games/fortunes --output data/fortunes.h5
"""
import argparse
import os
import subprocess
import sys


def rerun_with_python_that_has_h5py(error):
    """A pyenv or venv python3 earlier on PATH often hides Debian's python3
    and its python3-h5py: run again under the one tools/find-python.sh finds."""
    finder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "find-python.sh")
    if not os.environ.get("DPTRAIN_CONVERT_RERUN"):
        found = subprocess.run([finder], capture_output=True, text=True).stdout.strip()
        # Not realpath: a venv's python3 is a link to the very same binary.
        if found and os.path.abspath(found) != os.path.abspath(sys.executable):
            os.environ["DPTRAIN_CONVERT_RERUN"] = "1"
            os.execv(found, [found, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(f"{sys.argv[0]}: {error}; install python3-h5py python3-numpy (tools/install-deps.sh)")


try:
    import h5py
    import numpy as np
except ImportError as e:
    rerun_with_python_that_has_h5py(e)

VOCAB_SIZE = 256
CHUNK_BYTES = 1 << 20
# Control bytes that text does not hold much of: all below 32 but tab, line
# feed, vertical tab, form feed, carriage return, backspace (overstrikes),
# bell and escape; and DEL.
CONTROL = np.ones(256, dtype=bool)
CONTROL[32:127] = CONTROL[128:] = False
CONTROL[[7, 8, 9, 10, 11, 12, 13, 27]] = False


def die(message):
    print(f"convert_text: error: {message}", file=sys.stderr)
    sys.exit(2)


def input_files(inputs):
    """Every path named, folders expanded to their files sorted by path."""
    for path in inputs:
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                found += [os.path.join(root, name) for name in files]
            yield from sorted(found)
        elif os.path.exists(path):
            yield path
        else:
            die(f"{path}: no such file or folder")


def is_text(data):
    if not data:
        return True
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    return counts[0] == 0 and counts[CONTROL].sum() <= 0.1 * len(data)


def read_corpus(inputs):
    """The concatenated bytes and counts of files read and skipped."""
    parts, seen, read, skipped = [], set(), 0, {"not text": 0, "duplicate": 0, "empty": 0}
    for path in input_files(inputs):
        real = os.path.realpath(path)
        if not os.path.isfile(real):
            continue  # a socket, a fifo, a dangling link
        if real in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(real)
        try:
            with open(real, "rb") as f:
                data = f.read()
        except OSError as e:
            die(f"{path}: {e.strerror}")
        if not data:
            skipped["empty"] += 1
            continue
        if not is_text(data):
            skipped["not text"] += 1
            continue
        if parts and not parts[-1].endswith(b"\n"):
            parts.append(b"\n")
        parts.append(data)
        read += 1
    return b"".join(parts), read, skipped


def write_windows(f, name, stream, window):
    """/<name>/tokens: the windows of T+1 bytes of stream, written a chunk at a time."""
    n = (len(stream) - 1) // window
    # Chunks of at most 1 MiB, evened out so that the last one, which HDF5
    # stores whole, is not mostly empty.
    chunks = -(-n // max(1, CHUNK_BYTES // (window + 1)))
    rows = -(-n // chunks)
    arr = np.frombuffer(stream, dtype=np.uint8)
    # Row i is a view of arr[i*T : i*T+T+1]: no copy of the whole set.
    windows = np.lib.stride_tricks.as_strided(arr, shape=(n, window + 1), strides=(window, 1),
                                              writeable=False)
    ds = f.create_dataset(f"{name}/tokens", shape=(n, window + 1), dtype=np.uint8,
                          chunks=(rows, window + 1))
    for start in range(0, n, rows):
        ds[start:start + rows] = windows[start:start + rows]
    ds.attrs["vocab_size"] = VOCAB_SIZE
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="text files, or folders of them")
    ap.add_argument("--output", required=True, help="output HDF5 file (its folder is created)")
    ap.add_argument("--window", type=int, default=128, help="T: tokens a sample reads; rows hold T+1 (default 128)")
    ap.add_argument("--test-fraction", type=float, default=0.05,
                    help="share of the stream, at its end, held out as /test (default 0.05)")
    args = ap.parse_args()
    if args.window < 1:
        die(f"--window {args.window}: must be at least 1")
    if not 0 < args.test_fraction < 1:
        die(f"--test-fraction {args.test_fraction}: must be in (0, 1)")

    stream, read, skipped = read_corpus(args.inputs)
    if read == 0:
        die(f"no text files found in {' '.join(args.inputs)}")
    test_bytes = int(round(len(stream) * args.test_fraction))
    train, test = stream[:len(stream) - test_bytes], stream[len(stream) - test_bytes:]
    if len(train) < args.window + 1 or len(test) < args.window + 1:
        die(f"{' '.join(args.inputs)}: {len(stream)} bytes make {len(train)} training and {len(test)} "
            f"test bytes; each needs at least --window + 1 = {args.window + 1} for one window")

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    # Written under a temporary name and renamed, so an interrupted run never
    # leaves a partial file that a later run would take as done.
    tmp = args.output + ".tmp"
    with h5py.File(tmp, "w") as f:
        n_train = write_windows(f, "train", train, args.window)
        n_test = write_windows(f, "test", test, args.window)
        f.attrs["source"] = "byte-level text of " + " ".join(args.inputs)
    os.replace(tmp, args.output)

    skips = ", ".join(f"{v} {k}" for k, v in skipped.items() if v)
    dropped = (len(train) - 1) % args.window + (len(test) - 1) % args.window
    print(f"convert_text: read {read} files ({len(stream)} bytes{'; skipped ' + skips if skips else ''}); "
          f"/train: {n_train} windows of {args.window + 1} bytes from the first {len(train)} bytes, "
          f"/test: {n_test} windows from the last {len(test)} bytes ({args.test_fraction:g} of the text); "
          f"{dropped} bytes at the ends of the two sets fill no window; wrote {args.output}")


if __name__ == "__main__":
    main()
