#!/usr/bin/env python3
# Implements: a learnable synthetic data set in the docs/design.md section 3
# layout, written in slabs so any N fits in bounded memory.
"""Write a synthetic dptrain data file.

Classification: each class has a fixed random mean pattern; a sample is its
class mean plus Gaussian noise, so a small MLP reaches high accuracy.
Regression (--regression K): features are Gaussian, targets are a fixed
random linear map of them plus noise (float32 labels [N, K]).

Example:
    make_synthetic.py data.h5 --n 60000 --val-n 10000 --shape 28,28 \\
        --classes 10 --dtype uint8 --seed 1
"""
import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pyenv/venv pythons often lack Debian's python3-h5py
    sys.exit(f"{sys.argv[0]}: {e}; install python3-h5py python3-numpy or run with /usr/bin/python3")

CHUNK_BYTES = 1 << 20  # about 1 MiB per chunk along N
SLAB_BYTES = 64 << 20  # rows generated and written at a time


def uint8_scale(x):
    # Gaussian values around 0 to bytes around 128; clipped, as images are.
    return np.clip(np.rint(128.0 + 40.0 * x), 0, 255).astype(np.uint8)


def write_set(f, name, n, shape, args, means, weights, rng):
    dim = int(np.prod(shape))
    item = np.dtype(args.dtype).itemsize
    chunk_rows = int(max(1, min(n, CHUNK_BYTES // (dim * item))))
    g = f.create_group(name)
    feats = g.create_dataset("features", (n, *shape), dtype=args.dtype, chunks=(chunk_rows, *shape))
    if args.regression:
        labels = g.create_dataset("labels", (n, args.regression), dtype="float32",
                                  chunks=(max(1, min(n, CHUNK_BYTES // (4 * args.regression))), args.regression))
    else:
        labels = g.create_dataset("labels", (n,), dtype="int32", chunks=(max(1, min(n, CHUNK_BYTES // 4)),))
    slab = max(chunk_rows, (SLAB_BYTES // (dim * 4)) // chunk_rows * chunk_rows)
    for begin in range(0, n, slab):
        rows = min(slab, n - begin)
        if args.regression:
            x = rng.standard_normal((rows, dim), dtype=np.float32)
            xf = (uint8_scale(x).astype(np.float32) / 255.0 if args.dtype == "uint8"
                  else x.astype(args.dtype).astype(np.float32))
            y = xf @ weights + 0.05 * rng.standard_normal((rows, args.regression), dtype=np.float32)
            labels[begin:begin + rows] = y.astype(np.float32)
        else:
            y = rng.integers(0, args.classes, size=rows, dtype=np.int32)
            x = means[y] + args.noise * rng.standard_normal((rows, dim), dtype=np.float32)
            labels[begin:begin + rows] = y
        stored = uint8_scale(x) if args.dtype == "uint8" else x.astype(args.dtype)
        feats[begin:begin + rows] = stored.reshape(rows, *shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output HDF5 file")
    ap.add_argument("--n", type=int, required=True, help="rows of the first set")
    ap.add_argument("--val-n", type=int, default=None, help="rows of the other sets (default n/6)")
    ap.add_argument("--shape", default="28,28", help="feature shape per sample, e.g. 28,28 or 64")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--dtype", choices=["float32", "float16", "uint8"], default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regression", type=int, default=0, metavar="K",
                    help="write float32 targets [N, K] instead of class ids")
    ap.add_argument("--noise", type=float, default=1.0, help="noise around the class means")
    ap.add_argument("--sets", default="train,test", help="comma-separated set names")
    args = ap.parse_args()

    shape = tuple(int(s) for s in args.shape.split(",") if s)
    sets = [s for s in args.sets.split(",") if s]
    if args.n <= 0 or not shape or min(shape) <= 0 or not sets:
        ap.error("need --n > 0, a non-empty --shape of positive dims and at least one set")
    if not args.regression and args.classes < 2:
        ap.error("need --classes >= 2")
    val_n = args.val_n if args.val_n is not None else max(1, args.n // 6)
    dim = int(np.prod(shape))

    # The task (class means, regression weights) is shared by all sets; only
    # the samples differ per set.
    task = np.random.default_rng([args.seed, 0])
    means = (task.standard_normal((args.classes, dim)) * 1.5).astype(np.float32)
    weights = (task.standard_normal((dim, max(1, args.regression))) / np.sqrt(dim)).astype(np.float32)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with h5py.File(args.out, "w") as f:
        for i, name in enumerate(sets):
            rng = np.random.default_rng([args.seed, i + 1])
            write_set(f, name, args.n if i == 0 else val_n, shape, args, means, weights, rng)
        f.attrs["generator"] = "tools/make_synthetic.py"
        f.attrs["seed"] = args.seed
    print(f"wrote {args.out}: sets {', '.join(sets)}; shape {shape}, {args.dtype}, "
          + (f"{args.regression} targets" if args.regression else f"{args.classes} classes"))


if __name__ == "__main__":
    main()
