#!/usr/bin/env python3
# Implements: a /model-only weights file written by h5py, as another tool (a
# PyTorch export, a converter) would write it, for the --init-from CLI test.
# Only /model/dense<i>/weight float32 [out, in] and /model/dense<i>/bias
# float32 [out] (torch.nn.Linear layout); no attributes, contiguous storage.
#
#   init_from_h5py.py OUT.h5 --layers 784,256,10 --seed S
#
# Values are a pure function of (seed, layer, element) through splitmix64,
# computed here with numpy, so the test can recompute them and a C++ reader
# needs no Python RNG to agree with.
import argparse
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pyenv/venv pythons often lack Debian's python3-h5py
    sys.exit(f"{sys.argv[0]}: {e}; install python3-h5py python3-numpy or run with /usr/bin/python3")

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x):
    """Vectorised splitmix64 finaliser over a uint64 array (wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & MASK


def uniform(seed, stream, count):
    """count floats in [-1, 1), deterministic in (seed, stream)."""
    with np.errstate(over="ignore"):
        key = splitmix64(np.array([(seed * 1000003 + stream) % 2**64], dtype=np.uint64))[0]
        bits = splitmix64(np.arange(count, dtype=np.uint64) + key)
    return ((bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53) * 2.0 - 1.0


def layer_arrays(seed, i, n_in, n_out):
    # Glorot-uniform weights; small non-zero biases so a loaded bias is visible.
    limit = np.sqrt(6.0 / (n_in + n_out))
    w = (uniform(seed, 2 * i, n_out * n_in) * limit).astype(np.float32).reshape(n_out, n_in)
    b = (uniform(seed, 2 * i + 1, n_out) * 0.01).astype(np.float32)
    return w, b


def main():
    p = argparse.ArgumentParser(
        description="Write a /model-only weights file (torch.nn.Linear layout) with h5py.")
    p.add_argument("out", help="HDF5 file to write")
    p.add_argument("--layers", required=True,
                   help="widths: input then each dense layer's outputs, e.g. 784,256,10")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    try:
        widths = [int(x) for x in a.layers.split(",")]
    except ValueError:
        sys.exit(f"init_from_h5py.py: --layers must be integers, got {a.layers!r}")
    if len(widths) < 2 or min(widths) < 1:
        sys.exit("init_from_h5py.py: --layers needs at least two positive widths")
    if a.seed < 0:
        sys.exit("init_from_h5py.py: --seed must be >= 0")

    with h5py.File(a.out, "w") as f:
        for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
            w, b = layer_arrays(a.seed, i, n_in, n_out)
            f.create_dataset(f"model/dense{i}/weight", data=w)
            f.create_dataset(f"model/dense{i}/bias", data=b)
    shapes = ", ".join(f"dense{i} [{o}, {n}]" for i, (n, o) in enumerate(zip(widths, widths[1:])))
    print(f"wrote {a.out}: {shapes}")


if __name__ == "__main__":
    main()
