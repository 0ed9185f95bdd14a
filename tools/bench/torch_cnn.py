#!/usr/bin/env python3
# Implements: the PyTorch baseline of tools/bench's CNN rows: the network a
# dptrain --model spec describes (the job of --config, by default
# jobs/fashion_mnist_cnn.ini, with its batch, optimizer and lr), built in
# torch.nn and trained eager in one process or DDP (gloo) over processes
# with the step loop of torch_mlp.py; prints one JSON line with the timed
# samples/s.
"""PyTorch CPU baseline for the CNN rows of tools/bench/bench.py.

  torch_cnn.py --data data/fashion_mnist.h5 --config jobs/fashion_mnist_cnn.ini --mode eager
  torch_cnn.py --data data/fashion_mnist.h5 --model conv:8:3,relu,gap,dense:10 --mode ddp

Layers: conv:C:K[:S[:P]], bn, bn:local, relu, tanh, sigmoid, gelu,
maxpool:K[:S], avgpool:K[:S], gap, flatten, dense:N, dropout:P, with
dptrain's defaults (conv padding (K-1)/2, pool stride K) and a flatten
before a dense layer on images, as dptrain's dense does. Images are
[N, H, W] (one channel) or [N, C, H, W] in the file. Under DDP, bn is each
process's own statistics (torch's SyncBatchNorm needs CUDA), where
dptrain's `bn` sums over the global batch: the baseline does less work.
"""
import argparse
import configparser
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp  # noqa: E402  (the shared step loop; exits with advice without torch)
from torch_mlp import h5py, nn, np, torch  # noqa: E402

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}


def split_spec(spec):
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    if any("(" in t for t in tokens):
        sys.exit(f"{sys.argv[0]}: blocks (res(...)) are not supported by this baseline")
    return tokens


def make_layer(token, shape):
    """The torch module(s) of one token for samples of `shape` (C, H, W) or (F,)."""
    kind, *args = token.split(":")
    a = [int(v) for v in args] if kind not in ("dropout", "bn") else args
    image = len(shape) == 3
    if kind == "conv":
        filters, k = a[0], a[1]
        stride = a[2] if len(a) > 2 else 1
        pad = a[3] if len(a) > 3 else (k - 1) // 2
        return [nn.Conv2d(shape[0], filters, k, stride=stride, padding=pad)]
    if kind == "bn":
        return [(nn.BatchNorm2d if image else nn.BatchNorm1d)(shape[0])]
    if kind in ACTIVATIONS:
        return [ACTIVATIONS[kind]()]
    if kind in ("maxpool", "avgpool"):
        pool = nn.MaxPool2d if kind == "maxpool" else nn.AvgPool2d
        return [pool(a[0], stride=a[1] if len(a) > 1 else a[0])]
    if kind == "gap":
        return [nn.AdaptiveAvgPool2d(1)]
    if kind == "flatten":
        return [nn.Flatten()]
    if kind == "dense":
        return ([nn.Flatten()] if len(shape) > 1 else []) + [nn.Linear(int(np.prod(shape)), a[0])]
    if kind == "dropout":
        return [nn.Dropout(float(args[0]))]
    sys.exit(f"{sys.argv[0]}: layer '{token}' not supported by this baseline")


def build_net(spec, sample_shape):
    """nn.Sequential of spec for samples of sample_shape (C, H, W)."""
    modules, shape = [], tuple(sample_shape)
    for token in split_spec(spec):
        for m in make_layer(token, shape):
            modules.append(m)
            with torch.no_grad():  # the next layer's input shape, from a probe
                shape = tuple(m.eval()(torch.zeros((1, *shape))).shape[1:])
    return nn.Sequential(*modules).train()


def load_images(path, set_name):
    """The set as float32 [N, C, H, W] (uint8 scaled by 1/255) and int64 labels."""
    x, y = torch_mlp.load(path, set_name)
    with h5py.File(path, "r") as f:
        sample = f[f"{set_name}/features"].shape[1:]
    if len(sample) == 2:
        sample = (1, *sample)
    if len(sample) != 3:
        sys.exit(f"{sys.argv[0]}: features of shape {sample} are not images")
    return x.reshape(len(x), *sample), y


def build_cnn(args):
    """(model, x, y) for torch_mlp.run: the spec's network and the whole set."""
    x, y = load_images(args.data, args.set)
    return build_net(args.model, x.shape[1:]), x, y


def apply_job(args, ap):
    """Fills --model, --batch, --lr, the optimizer and weight decay from the
    job file, unless given on the command line."""
    job = configparser.ConfigParser(inline_comment_prefixes=("#",))
    with open(args.config) as f:
        job.read_string("[job]\n" + f.read())
    keys = job["job"]
    for key, dest, cast in (("model", "model", str), ("batch-size", "batch", int),
                            ("lr", "lr", float), ("optimizer", "optimizer", str),
                            ("momentum", "momentum", float), ("weight-decay", "weight_decay", float)):
        if key in keys and getattr(args, dest) == ap.get_default(dest):
            setattr(args, dest, cast(keys[key]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    torch_mlp.add_run_args(ap, warmup=20, steps=200)
    ap.add_argument("--config", help="a dptrain job file: its model, batch-size, optimizer, lr")
    ap.add_argument("--model", help="a dptrain --model spec (overrides the job's)")
    ap.add_argument("--optimizer", default="adam", choices=("adam", "adamw", "sgd"))
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    args = ap.parse_args()
    if args.config:
        apply_job(args, ap)
    if not args.model:
        ap.error("give --model SPEC or --config JOB")
    torch_mlp.run(args, build_cnn)


if __name__ == "__main__":
    main()
