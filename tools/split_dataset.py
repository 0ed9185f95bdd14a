#!/usr/bin/env python3
# Implements: splitting a dptrain data file (docs/design.md section 3) into N
# files, as HPC data sets come, plus the two ways to name them as one set:
# a `.txt` list (one file a line, relative to the list) and an HDF5 file of
# virtual datasets mapping the parts (relative source names too, so the
# folder can move).
"""Split a dptrain data file into N files.

Every set (group with features and labels) is cut into N contiguous,
nearly equal pieces; part i holds piece i of every set, chunked like the
input. Writes OUT/<stem>-000.h5 ... , OUT/<stem>.txt (the list) and
OUT/<stem>-virtual.h5 (virtual datasets over the parts).

Example:
    tools/split_dataset.py data/fashion_mnist.h5 data/fmnist-split --parts 8
    dptrain train --data data/fmnist-split/fashion_mnist.txt ...
"""
import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pyenv/venv pythons often lack Debian's python3-h5py
    sys.exit(f"{sys.argv[0]}: {e}; install python3-h5py python3-numpy or use tools/find-python.sh")

SLAB_BYTES = 64 << 20  # rows copied at a time


def data_sets(f):
    return [name for name, g in f.items()
            if isinstance(g, h5py.Group) and "features" in g and "labels" in g]


def bounds(n, parts):
    # Piece i is rows [bounds[i], bounds[i + 1]); the first n % parts get one more.
    base, extra = divmod(n, parts)
    out = [0]
    for i in range(parts):
        out.append(out[-1] + base + (1 if i < extra else 0))
    return out


def copy_rows(src, dst, begin, end):
    row_bytes = max(1, src.dtype.itemsize * int(np.prod(src.shape[1:], dtype=np.int64)))
    step = max(1, SLAB_BYTES // row_bytes)
    for b in range(begin, end, step):
        e = min(end, b + step)
        dst[b - begin:e - begin] = src[b:e]


def write_part(src, path, sets, cuts, i):
    with h5py.File(path, "w") as out:
        for name in sets:
            lo, hi = cuts[name][i], cuts[name][i + 1]
            for key in ("features", "labels"):
                d = src[name][key]
                chunks = None
                if d.chunks and hi > lo:
                    chunks = (min(d.chunks[0], hi - lo),) + tuple(d.chunks[1:])
                part = out.create_dataset(f"{name}/{key}", (hi - lo,) + d.shape[1:], dtype=d.dtype,
                                          chunks=chunks)
                copy_rows(d, part, lo, hi)


def write_virtual(src, path, sets, cuts, names):
    with h5py.File(path, "w") as out:
        for name in sets:
            for key in ("features", "labels"):
                d = src[name][key]
                layout = h5py.VirtualLayout(shape=d.shape, dtype=d.dtype)
                for i, part in enumerate(names):
                    lo, hi = cuts[name][i], cuts[name][i + 1]
                    if hi > lo:
                        layout[lo:hi] = h5py.VirtualSource(part, f"{name}/{key}",
                                                           shape=(hi - lo,) + d.shape[1:])
                out.create_virtual_dataset(f"{name}/{key}", layout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="dptrain data file")
    ap.add_argument("out_dir", help="folder for the parts, the list and the virtual file")
    ap.add_argument("--parts", type=int, required=True, help="number of files N")
    ap.add_argument("--stem", help="name stem (default: the input's name)")
    args = ap.parse_args()
    if args.parts < 1:
        sys.exit(f"{sys.argv[0]}: --parts must be >= 1")
    stem = args.stem or os.path.splitext(os.path.basename(args.input))[0]
    os.makedirs(args.out_dir, exist_ok=True)
    with h5py.File(args.input, "r") as src:
        sets = data_sets(src)
        if not sets:
            sys.exit(f"{args.input}: no set with features and labels")
        cuts = {name: bounds(src[name]["features"].shape[0], args.parts) for name in sets}
        names = [f"{stem}-{i:03d}.h5" for i in range(args.parts)]
        for i, name in enumerate(names):
            write_part(src, os.path.join(args.out_dir, name), sets, cuts, i)
        with open(os.path.join(args.out_dir, stem + ".txt"), "w") as lst:
            lst.write("".join(n + "\n" for n in names))
        write_virtual(src, os.path.join(args.out_dir, stem + "-virtual.h5"), sets, cuts, names)
    print(f"wrote {args.parts} parts of sets {', '.join(sets)} to {args.out_dir}: "
          f"{stem}.txt, {stem}-virtual.h5")


if __name__ == "__main__":
    main()
