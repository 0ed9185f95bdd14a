#!/usr/bin/env python3
# Implements: Fashion-MNIST idx files (gzipped) to a dptrain data file with
# /train and /test: uint8 features [N, 28, 28], int32 labels [N].
"""Convert Fashion-MNIST to dptrain's HDF5 layout (docs/design.md section 3).

The default source is where Debian's dataset-fashion-mnist package puts the
files; --src points elsewhere (same file names, gzipped or not).
"""
import argparse
import gzip
import os
import struct
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

DEFAULT_SRC = "/usr/share/datasets/fashion-mnist"
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049
SETS = {"train": "train", "test": "t10k"}
CHUNK_BYTES = 1 << 20


def read_idx(src, stem, magic):
    for name in (stem + ".gz", stem):
        path = os.path.join(src, name)
        if os.path.exists(path):
            break
    else:
        sys.exit(f"convert_fashion_mnist: {os.path.join(src, stem)}(.gz) not found")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        sys.exit(f"convert_fashion_mnist: {path}: too short for an idx header")
    got, count = struct.unpack(">II", data[:8])
    if got != magic:
        sys.exit(f"convert_fashion_mnist: {path}: magic {got}, expected {magic}")
    dims = [count]
    header = 8
    if magic == IMAGES_MAGIC:
        dims += list(struct.unpack(">II", data[8:16]))
        header = 16
    expected = header + int(np.prod(dims))
    if len(data) != expected:
        sys.exit(f"convert_fashion_mnist: {path}: {len(data)} bytes, expected {expected} for {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", default=DEFAULT_SRC, help=f"directory of the idx files (default {DEFAULT_SRC})")
    ap.add_argument("--train-rows", type=int, default=0, help="keep the first N training images (0: all)")
    ap.add_argument("--test-rows", type=int, default=0, help="keep the first N test images (0: all)")
    ap.add_argument("out", help="output HDF5 file (its folder is created)")
    args = ap.parse_args()
    keep = {"train": args.train_rows, "test": args.test_rows}
    if min(keep.values()) < 0:
        ap.error("--train-rows and --test-rows must be >= 0")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # Written under a temporary name and renamed, so an interrupted run never
    # leaves a partial file that a later run (tools/demo.sh) would take as done.
    tmp = args.out + ".tmp"
    with h5py.File(tmp, "w") as f:
        for name, stem in SETS.items():
            images = read_idx(args.src, f"{stem}-images-idx3-ubyte", IMAGES_MAGIC)
            labels = read_idx(args.src, f"{stem}-labels-idx1-ubyte", LABELS_MAGIC)
            if len(images) != len(labels):
                sys.exit(f"convert_fashion_mnist: {name}: {len(images)} images but {len(labels)} labels")
            if labels.max() >= 10:
                sys.exit(f"convert_fashion_mnist: {name}: label {labels.max()} outside [0, 10)")
            if keep[name]:
                images, labels = images[:keep[name]], labels[:keep[name]]
            row = int(np.prod(images.shape[1:]))
            chunk = (max(1, min(len(images), CHUNK_BYTES // row)), *images.shape[1:])
            f.create_dataset(f"{name}/features", data=images, chunks=chunk)
            f.create_dataset(f"{name}/labels", data=labels.astype(np.int32),
                             chunks=(min(len(labels), CHUNK_BYTES // 4),))
            print(f"{args.out}: /{name}: {len(images)} images {images.shape[1:]}")
        f.attrs["source"] = "Fashion-MNIST (Zalando Research), MIT license"
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
