#!/usr/bin/env python3
# Implements: the PyTorch baseline of tools/bench: dptrain's default job (MLP
# 784-256-256-10, softmax cross-entropy, Adam lr 1e-3, global batch 128,
# shuffled each epoch) on CPU, eager in one process or DDP (gloo) over
# processes; prints one JSON line with the timed samples/s.
"""PyTorch CPU baseline for tools/bench/bench.py.

  torch_mlp.py --data data/fashion_mnist.h5 --mode eager --threads 1
  torch_mlp.py --data data/fashion_mnist.h5 --mode ddp --ranks 2

The whole /<set> is read with h5py into float32 tensors up front (uint8
scaled by 1/255), so the timed loop holds no I/O: indexing a batch out of the
in-memory tensor is the per-step data cost, as dptrain's cached path. Each
DDP rank takes its slice of every global batch the way dptrain splits it
(rank r gets B/P or B/P+1 rows), so the global batch stays --batch.
"""
import argparse
import json
import os
import socket
import sys
import time

try:
    import h5py
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
except ImportError as e:
    sys.exit(f"{sys.argv[0]}: {e}; run tools/bench/install.sh and use /usr/bin/python3")


def load(path, set_name):
    with h5py.File(path, "r") as f:
        feats = f[f"{set_name}/features"][...]
        labels = f[f"{set_name}/labels"][...]
    x = feats.reshape(len(feats), -1)
    x = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))


def make_model(inputs, classes):
    return nn.Sequential(nn.Linear(inputs, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, classes))


def batches(n, batch, seed):
    """Endless global batches of indices: a fresh permutation per epoch, the
    last smaller batch of an epoch kept (as dptrain does)."""
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g)
        for begin in range(0, n, batch):
            yield perm[begin:begin + batch]
        epoch += 1


def shard(idx, rank, ranks):
    # dptrain's split: the first B mod P ranks get one row more.
    base, extra = divmod(len(idx), ranks)
    begin = rank * base + min(rank, extra)
    return idx[begin:begin + base + (1 if rank < extra else 0)]


def make_optimizer(args, model):
    """Adam at --lr, or what a job's optimizer keys say (torch_cnn.py --config)."""
    kind = getattr(args, "optimizer", "adam")
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=getattr(args, "momentum", 0.0))
    if kind not in ("adam", "adamw"):
        sys.exit(f"{sys.argv[0]}: optimizer '{kind}' not supported by this baseline")
    adam = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return adam(model.parameters(), lr=args.lr, weight_decay=getattr(args, "weight_decay", 0.0))


def train(args, rank, ranks, model, x, y):
    """Warm-up steps, then --steps timed ones; returns (samples, seconds)."""
    opt = make_optimizer(args, model)
    loss_fn = nn.CrossEntropyLoss()
    it = batches(len(x), args.batch, args.seed)
    model.train()

    def step(idx):
        mine = shard(idx, rank, ranks)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[mine]), y[mine])
        # DDP averages over ranks; with unequal shards that differs slightly
        # from the exact global mean, which does not change the cost.
        loss.backward()
        opt.step()
        return len(idx)

    for _ in range(args.warmup):
        step(next(it))
    if ranks > 1:
        dist.barrier()
    t0 = time.perf_counter()
    samples = sum(step(next(it)) for _ in range(args.steps))
    if ranks > 1:
        dist.barrier()
    return samples, time.perf_counter() - t0


def report(args, ranks, samples, seconds, model):
    print(json.dumps({"mode": args.mode, "ranks": ranks, "threads": torch.get_num_threads(),
                      "batch": args.batch, "steps": args.steps,
                      "params": sum(p.numel() for p in model.parameters()),
                      "samples_per_s": samples / seconds, "seconds": seconds,
                      "torch": torch.__version__}), flush=True)


def build_mlp(args):
    """(model, x, y): the MLP for the data's sample width, and the whole set."""
    x, y = load(args.data, args.set)
    return make_model(x.shape[1], args.classes), x, y


def ddp_worker(rank, args, port, build):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)  # same init everywhere; DDP broadcasts rank 0's anyway
    model, x, y = build(args)
    samples, seconds = train(args, rank, args.ranks, nn.parallel.DistributedDataParallel(model), x, y)
    if rank == 0:
        report(args, args.ranks, samples, seconds, model)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_run_args(ap, batch=128, lr=1e-3, warmup=100, steps=1000):
    """The options every baseline of tools/bench takes."""
    ap.add_argument("--data", required=True, help="dptrain HDF5 data file")
    ap.add_argument("--set", default="train", help="group in --data (default train)")
    ap.add_argument("--mode", choices=("eager", "ddp"), default="eager")
    ap.add_argument("--ranks", type=int, default=2, help="ddp: processes (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--batch", type=int, default=batch, help=f"GLOBAL batch (default {batch})")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--warmup", type=int, default=warmup,
                    help=f"untimed steps first (default {warmup})")
    ap.add_argument("--steps", type=int, default=steps, help=f"timed steps (default {steps})")
    ap.add_argument("--seed", type=int, default=0)


def run(args, build):
    """Eager in this process, or DDP over --ranks spawned ones; build(args)
    gives (model, x, y) and must be a module-level function (spawn pickles it)."""
    if args.mode == "eager":
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        model, x, y = build(args)
        samples, seconds = train(args, 0, 1, model, x, y)
        report(args, 1, samples, seconds, model)
    else:
        mp.spawn(ddp_worker, args=(args, free_port(), build), nprocs=args.ranks, join=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap)
    run(ap.parse_args(), build_mlp)


if __name__ == "__main__":
    main()
