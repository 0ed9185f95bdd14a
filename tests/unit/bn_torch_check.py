#!/usr/bin/env python3
# Implements: the PyTorch side of the bn comparison (test_batch_norm_torch.cpp):
# reads the cases dptrain ran (JSON: shape, weight, bias, and per training
# step x, dy and dptrain's y, dx, weight and bias gradients; then its running
# statistics and an eval output), runs torch.nn.BatchNorm1d/2d/3d on the
# same numbers and exits 1 when any tensor differs by more than its bound.
# Exit 77 when torch cannot be imported (the test then skips).
import json
import sys

try:
    import torch
except ImportError:
    print("torch not importable by " + sys.executable)
    sys.exit(77)

REL = 2e-6  # of the largest value of each tensor: float rounding, sums of <= 45 terms


def ratio(got, want):
    got = torch.tensor(got, dtype=torch.float64).reshape(want.shape)
    want = want.double()
    scale = max(float(want.abs().max()), 1e-30)
    return float((got - want).abs().max()) / (REL * scale)


def report(name, r):
    if not r < 1.0:
        print("  %s: error/bound %.4g" % (name, r))
    return r


def run_case(case):
    shape = case["shape"]  # [rows, C, ...]
    channels = shape[1]
    kind = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
            5: torch.nn.BatchNorm3d}[len(shape)]
    bn = kind(channels, eps=1e-5, momentum=0.1).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(case["weight"], dtype=torch.float64))
        bn.bias.copy_(torch.tensor(case["bias"], dtype=torch.float64))
    worst = 0.0
    bn.train()
    for step in case["steps"]:
        x = torch.tensor(step["x"], dtype=torch.float64).reshape(shape).requires_grad_()
        dy = torch.tensor(step["dy"], dtype=torch.float64).reshape(shape)
        bn.zero_grad()
        y = bn(x)
        y.backward(dy)
        for name, want in (("y", y.detach()), ("dx", x.grad), ("dweight", bn.weight.grad),
                           ("dbias", bn.bias.grad)):
            worst = max(worst, report(name, ratio(step[name], want)))
    for name, want in (("running_mean", bn.running_mean), ("running_var", bn.running_var)):
        worst = max(worst, report(name, ratio(case[name], want)))
    bn.eval()
    with torch.no_grad():
        x = torch.tensor(case["eval_x"], dtype=torch.float64).reshape(case["eval_shape"])
        worst = max(worst, report("eval y", ratio(case["eval_y"], bn(x))))
    return worst


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    failed = False
    for case in cases:
        worst = run_case(case)
        print("torch %s shape %s: worst error/bound %.4f (bound %.0e of the largest value)"
              % (torch.__version__, case["shape"], worst, REL))
        failed |= not worst < 1.0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
