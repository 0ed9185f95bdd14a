#!/usr/bin/env python3
# Implements: the PyTorch side of test_torch_cnn.sh: the same small CNN that
# dptrain builds from SPEC, in torch.nn with the docs/design.md section 4 names,
#   torch_cnn.py init OUT.h5 --seed S           initial weights, /model only
#   torch_cnn.py train DATA.h5 INIT.h5 OUT.h5 --optimizer sgd|adam --lr LR
#                --momentum M --batch B --steps N
# `train` runs in float64 from the same start, on the global batches in file
# order (dptrain --shuffle none), so what differs from dptrain's float32 run
# is dptrain's rounding alone.
import argparse
import sys

import h5py
import numpy as np
import torch
from torch import nn

SPEC = "conv:4:3,bn,relu,maxpool:2,res(conv:8:3:2,bn,relu,conv:8:3,bn),relu,gap,dense:5"
IN_CHANNELS = 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.proj = nn.Conv2d(4, 8, 1, stride=2)
        self.proj_bn = nn.BatchNorm2d(8)

    def forward(self, x):
        f = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return f + self.proj_bn(self.proj(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv0 = nn.Conv2d(IN_CHANNELS, 4, 3, padding=1)
        self.bn0 = nn.BatchNorm2d(4)
        self.res0 = Block()
        self.dense0 = nn.Linear(8, 5)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn0(self.conv0(x))), 2)
        x = torch.relu(self.res0(x))
        return self.dense0(x.mean(dim=(2, 3)))

    # /model/<layer>/<tensor> (docs/design.md section 4) -> torch tensor
    def by_design_name(self):
        b = self.res0
        layers = {"conv0": self.conv0, "bn0": self.bn0, "conv1": b.conv1, "bn1": b.bn1,
                  "conv2": b.conv2, "bn2": b.bn2, "res0/proj": b.proj, "res0/proj_bn": b.proj_bn,
                  "dense0": self.dense0}
        out = {}
        for name, m in layers.items():
            for t in ("weight", "bias", "running_mean", "running_var"):
                if hasattr(m, t):
                    out[f"{name}/{t}"] = getattr(m, t)
        return out


def init(args):
    torch.manual_seed(args.seed)
    net = Net()
    with torch.no_grad():  # running statistics away from 0 / 1, so a swap shows
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    with h5py.File(args.out, "w") as f:
        for path, t in net.by_design_name().items():
            f[f"model/{path}"] = t.detach().numpy().astype(np.float32)


def train(args):
    torch.set_default_dtype(torch.float64)
    net = Net()
    with h5py.File(args.init, "r") as f, torch.no_grad():
        for path, t in net.by_design_name().items():
            t.copy_(torch.from_numpy(f[f"model/{path}"][...].astype(np.float64)))
    with h5py.File(args.data, "r") as f:
        x = torch.from_numpy(f["train/features"][...].astype(np.float64))
        y = torch.from_numpy(f["train/labels"][...].astype(np.int64))
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=args.eps)
    net.train()
    n = x.shape[0]
    for step in range(args.steps):
        begin = (step * args.batch) % n
        xb, yb = x[begin:begin + args.batch], y[begin:begin + args.batch]
        opt.zero_grad()
        nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
    with h5py.File(args.out, "w") as f:
        for path, t in net.by_design_name().items():
            f[f"model/{path}"] = t.detach().numpy()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("out")
    a.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("data")
    t.add_argument("init")
    t.add_argument("out")
    t.add_argument("--optimizer", choices=["sgd", "adam"], required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--momentum", type=float, default=0.0)
    t.add_argument("--eps", type=float, default=1e-8)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    args = ap.parse_args()
    init(args) if args.cmd == "init" else train(args)


if __name__ == "__main__":
    sys.exit(main())
