#!/usr/bin/env python3
# Implements: the PyTorch side of test_torch_clip.sh: an MLP (GELU tanh
# form, ReLU) trained with
# torch.nn.utils.clip_grad_norm_ and weight decay on the weight matrices only
# (two parameter groups, the GPT practice), from the same initial weights as
# dptrain, in float64, on the global batches in file order.
#   torch_clip.py init OUT.h5 --layers 12,16,16,5 --seed S
#   torch_clip.py train DATA.h5 INIT.h5 OUT.h5 --optimizer adamw|sgd --lr LR
#                 --weight-decay WD --clip X --batch B --steps N [--momentum M]
# OUT.h5 holds /model (docs/design.md section 4 names) and /grad_norm, the
# norm before clipping of every step, as clip_grad_norm_ returned it.
import argparse
import sys

import h5py
import numpy as np
import torch
from torch import nn


# The hidden layers alternate GELU's tanh form (dptrain gelu:tanh) and ReLU.
def make_net(layers):
    mods = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i + 2 < len(layers):
            mods.append(nn.GELU(approximate="tanh") if i % 2 == 0 else nn.ReLU())
    return nn.Sequential(*mods)


def by_design_name(net):
    out = {}
    for i, m in enumerate(x for x in net if isinstance(x, nn.Linear)):
        out[f"dense{i}/weight"] = m.weight
        out[f"dense{i}/bias"] = m.bias
    return out


def init(args):
    torch.manual_seed(args.seed)
    net = make_net([int(v) for v in args.layers.split(",")])
    with h5py.File(args.out, "w") as f:
        for path, t in by_design_name(net).items():
            f[f"model/{path}"] = t.detach().numpy().astype(np.float32)


def train(args):
    torch.set_default_dtype(torch.float64)
    layers = [int(v) for v in args.layers.split(",")]
    net = make_net(layers)
    with h5py.File(args.init, "r") as f, torch.no_grad():
        for path, t in by_design_name(net).items():
            t.copy_(torch.from_numpy(f[f"model/{path}"][...].astype(np.float64)))
    with h5py.File(args.data, "r") as f:
        x = torch.from_numpy(f["train/features"][...].astype(np.float64))
        y = torch.from_numpy(f["train/labels"][...].astype(np.int64))
    matrices = [p for p in net.parameters() if p.dim() >= 2]
    others = [p for p in net.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": args.weight_decay},
              {"params": others, "weight_decay": 0.0}]
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=args.lr, momentum=args.momentum)
    else:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    n = x.shape[0]
    norms = []
    for step in range(args.steps):
        begin = (step * args.batch) % n
        xb, yb = x[begin:begin + args.batch], y[begin:begin + args.batch]
        opt.zero_grad()
        nn.functional.cross_entropy(net(xb), yb).backward()
        norms.append(float(nn.utils.clip_grad_norm_(net.parameters(), args.clip)))
        opt.step()
    with h5py.File(args.out, "w") as f:
        for path, t in by_design_name(net).items():
            f[f"model/{path}"] = t.detach().numpy()
        f["grad_norm"] = np.array(norms)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("out")
    a.add_argument("--layers", required=True)
    a.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    for name in ("data", "init", "out"):
        t.add_argument(name)
    t.add_argument("--layers", required=True)
    t.add_argument("--optimizer", choices=["sgd", "adamw"], required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--momentum", type=float, default=0.0)
    t.add_argument("--weight-decay", type=float, required=True)
    t.add_argument("--clip", type=float, required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    args = ap.parse_args()
    init(args) if args.cmd == "init" else train(args)


if __name__ == "__main__":
    sys.exit(main())
