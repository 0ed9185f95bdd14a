#!/usr/bin/env python3
# Implements: one small data file per malformed case of docs/design.md section 3,
# plus OUTDIR/manifest.tsv so a shell test can loop over them.
"""Write malformed dptrain data files and a manifest of expected errors.

Every file has a broken /train set and a valid /test set (so only /train is
to blame). Sets have N = 32 rows of 8 float32 features and int32 class ids
in [0, 10): train them with a model ending in dense:10 (--loss xent), except
rows whose third column says mse (float32 targets [32, 2]: end in dense:2).

manifest.tsv has one line per file, tab-separated:
    FILE <TAB> EXPECTED SUBSTRING OF THE ERROR <TAB> LOSS
for example:
    while IFS=$'\\t' read -r file want loss; do ...; done < OUTDIR/manifest.tsv
Every case must make dptrain exit with code 3.
"""
import argparse
import sys
import os

try:
    import h5py
    import numpy as np
except ImportError as e:  # pyenv/venv pythons often lack Debian's python3-h5py
    sys.exit(f"{sys.argv[0]}: {e}; install python3-h5py python3-numpy or run with /usr/bin/python3")

N, D, CLASSES = 32, 8, 10


def good_features(n=N):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, D)).astype(np.float32)


def good_labels(n=N):
    return (np.arange(n) % CLASSES).astype(np.int32)


def write(path, features=None, labels=None, valid_test=True):
    with h5py.File(path, "w") as f:
        if features is not None:
            f["train/features"] = features
        if labels is not None:
            f["train/labels"] = labels
        if features is None or labels is None:
            f.require_group("train")
        if valid_test:
            f["test/features"] = good_features(16)
            f["test/labels"] = good_labels(16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    out = ap.parse_args().outdir
    os.makedirs(out, exist_ok=True)
    cases = []

    def case(name, want, loss="xent"):
        cases.append((name, want, loss))
        return os.path.join(out, name)

    write(case("missing_features.h5", "/train/features: missing"), labels=good_labels())
    write(case("missing_labels.h5", "/train/labels: missing"), features=good_features())
    write(case("features_float64.h5", "/train/features: dtype float64"),
          good_features().astype(np.float64), good_labels())
    write(case("features_uint16.h5", "/train/features: dtype uint16"),
          (np.abs(good_features()) * 100).astype(np.uint16), good_labels())
    bad_half = good_features().astype(np.float16)
    bad_half[5, 1] = np.inf
    write(case("features_float16_inf.h5", "/train/features: Inf at index 5"), bad_half, good_labels())
    write(case("features_rank1.h5", "/train/features: rank 1"),
          good_features()[:, 0].copy(), good_labels())
    write(case("labels_rank2_int.h5", "/train/labels: int32 labels of shape [32, 2]"),
          good_features(), np.stack([good_labels(), good_labels()], axis=1))
    write(case("n_mismatch.h5", "features have 32 rows but labels have 31"),
          good_features(), good_labels()[:31])
    write(case("n_zero.h5", "N = 0"),
          np.zeros((0, D), np.float32), np.zeros((0,), np.int32))

    labels = good_labels()
    labels[7] = -1
    write(case("label_negative.h5", "/train/labels: label -1 at index 7"), good_features(), labels)
    labels = good_labels()
    labels[5] = CLASSES
    write(case("label_too_big.h5", "/train/labels: label 10 at index 5"), good_features(), labels)

    feats = good_features()
    feats[9, 3] = np.nan
    write(case("feature_nan.h5", "/train/features: NaN at index 9"), feats, good_labels())
    feats = good_features()
    feats[11, 0] = np.inf
    write(case("feature_inf.h5", "/train/features: Inf at index 11"), feats, good_labels())

    targets = np.ones((N, 2), np.float32)
    targets[4, 1] = np.nan
    with h5py.File(case("target_nan.h5", "/train/labels: NaN at index 4", "mse"), "w") as f:
        f["train/features"] = good_features()
        f["train/labels"] = targets
        f["test/features"] = good_features(16)
        f["test/labels"] = np.ones((16, 2), np.float32)

    with open(case("not_hdf5.h5", "not an HDF5 file"), "w") as f:
        f.write("features,labels\n0.5,1\n")

    path = case("truncated.h5", "cannot open HDF5 file")
    write(path, good_features(4096), good_labels(4096))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)

    with open(os.path.join(out, "manifest.tsv"), "w") as f:
        for name, want, loss in cases:
            f.write(f"{name}\t{want}\t{loss}\n")
    print(f"wrote {len(cases)} files and manifest.tsv to {out}")


if __name__ == "__main__":
    main()
