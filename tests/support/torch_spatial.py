#!/usr/bin/env python3
# Implements: the PyTorch side of the spatial layer check (test_torch_spatial.cpp):
# conv / max pool / average pool forward and backward in float64 with
# torch.nn.functional, on the float32 inputs the test wrote, so that the
# layers' semantics (padding, floor, weight layout) are checked against
# torch's own. Exits 77 when torch cannot be imported.
#
#   torch_spatial.py CASES
#
# CASES has one line per case, "DIR KIND ROWS SHAPE ARGS": KIND conv,
# maxpool or avgpool, SHAPE "C,H,W" or "C,D,H,W", ARGS
# "filters,kernel,stride,padding" (conv) or "window,stride" (pooling). DIR
# holds x.f32, dy.f32 and for conv w.f32, b.f32 (raw little-endian
# float32); y.f64, dx.f64 and for conv dw.f64, db.f64 are written there.
# One process for all cases: importing torch takes seconds.
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_spatial.py: {e}", file=sys.stderr)
    sys.exit(77)


def load(directory, name, shape):
    data = np.fromfile(f"{directory}/{name}.f32", dtype="<f4").astype(np.float64)
    return torch.tensor(data.reshape(shape), requires_grad=True)


def save(directory, name, tensor):
    tensor.detach().numpy().astype("<f8").tofile(f"{directory}/{name}.f64")


def run_case(directory, kind, rows, shape, args):
    sample = [int(v) for v in shape.split(",")]
    args = [int(v) for v in args.split(",")]
    dims = len(sample) - 1
    x = load(directory, "x", [int(rows)] + sample)
    if kind == "conv":
        filters, kernel, stride, padding = args
        w = load(directory, "w", [filters, sample[0]] + [kernel] * dims)
        b = load(directory, "b", [filters])
        conv = F.conv2d if dims == 2 else F.conv3d
        y = conv(x, w, b, stride=stride, padding=padding)
    else:
        window, stride = args
        pools = {("maxpool", 2): F.max_pool2d, ("maxpool", 3): F.max_pool3d,
                 ("avgpool", 2): F.avg_pool2d, ("avgpool", 3): F.avg_pool3d}
        y = pools[(kind, dims)](x, window, stride)
    dy = np.fromfile(f"{directory}/dy.f32", dtype="<f4").astype(np.float64)
    y.backward(torch.tensor(dy.reshape(y.shape)))
    save(directory, "y", y)
    save(directory, "dx", x.grad)
    if kind == "conv":
        save(directory, "dw", w.grad)
        save(directory, "db", b.grad)


def main():
    with open(sys.argv[1]) as cases:
        for line in cases:
            if line.strip():
                run_case(*line.split())


if __name__ == "__main__":
    main()
