#!/usr/bin/env python3
# Implements: the CNN rows of tools/bench/bench.py, on the job of --cnn-job
# (jobs/fashion_mnist_cnn.ini: its network, batch and optimizer, a fixed
# number of steps): dptrain against PyTorch eager (1 rank) and DDP gloo
# (2 ranks) through tools/bench/torch_cnn.py, and the rows of
# dptrain_cnn_bench (conv layers against bare oneDNN primitives, the share
# of the step in bn's collectives).
import configparser
import os
import shlex

HERE = os.path.dirname(os.path.abspath(__file__))
ONE_RANK = "CNN 1 rank, 1 thread"
DDP = "CNN 2 ranks DDP"
TARGETS = {ONE_RANK: ">= 1.3", DDP: ">= 2"}


def read_job(path):
    """The job file's keys (INI without a section, as dptrain --config reads it)."""
    job = configparser.ConfigParser(inline_comment_prefixes=("#",))
    with open(path) as f:
        job.read_string("[job]\n" + f.read())
    return dict(job["job"])


def sample_shape(data, set_name="train"):
    """'C,H,W' of the set's samples (one channel for [N, H, W] features)."""
    import h5py
    with h5py.File(data, "r") as f:
        shape = f[f"{set_name}/features"].shape[1:]
    return ",".join(str(d) for d in ((1, *shape) if len(shape) == 2 else shape))


def describe(args):
    """One line for the results header."""
    job = read_job(args.cnn_job)
    return (f"CNN: {os.path.relpath(args.cnn_job, os.path.dirname(os.path.dirname(HERE)))} "
            f"(`{job.get('model')}`, batch {job.get('batch-size')}, {job.get('optimizer')} "
            f"lr {job.get('lr')}); dptrain {args.cnn_steps} steps (samples/s of its train events "
            f"every {args.cnn_log_every} after the first), torch {args.cnn_torch_warmup} warm-up "
            f"+ {args.cnn_torch_steps} timed steps")


def runs(bench):
    """(name, run) of one repeat of the end-to-end CNN runs."""
    a = bench.a
    dp = dict(job=a.cnn_job, steps=a.cnn_steps, log_every=a.cnn_log_every)
    torch = dict(script="torch_cnn.py", extra=["--config", a.cnn_job],
                 warmup=a.cnn_torch_warmup, steps=a.cnn_torch_steps)
    return [("cnn_dp_1r", lambda: bench.ours(1, **dp)),
            ("cnn_torch_eager", lambda: bench.torch("eager", 1, **torch)),
            ("cnn_dp_2r", lambda: bench.ours(2, **dp)),
            ("cnn_torch_ddp", lambda: bench.torch("ddp", 2, **torch))]


def same_network(repeats):
    """A note saying whether both sides trained as many parameters."""
    runs = (("cnn_dp_1r", "cnn_torch_eager"), ("cnn_dp_2r", "cnn_torch_ddp"))
    counts = {(rep[dp].get("params"), rep[t].get("params")) for rep in repeats for dp, t in runs}
    ours, theirs = next(iter(counts))
    if len(counts) == 1 and ours is not None and ours == theirs:
        return f"{ours:,} parameters on both sides"
    return f"PARAMETER COUNTS DIFFER (dptrain, torch): {sorted(counts, key=str)}"


def rows(repeats, ratio_row):
    s = lambda rep, k: rep[k]["samples_per_s"]
    same = same_network(repeats)
    return [
        ratio_row(repeats, ONE_RANK, TARGETS[ONE_RANK], "cnn_dp_1r",
                  lambda sps: sps("cnn_torch_eager"),
                  lambda rep: s(rep, "cnn_dp_1r") / s(rep, "cnn_torch_eager"),
                  "dptrain 1 rank", "torch eager 1 thread",
                  f"the CNN job, {same}; ratio = ours / torch samples/s"),
        ratio_row(repeats, DDP, TARGETS[DDP], "cnn_dp_2r", lambda sps: sps("cnn_torch_ddp"),
                  lambda rep: s(rep, "cnn_dp_2r") / s(rep, "cnn_torch_ddp"),
                  "dptrain mpiexec -n 2", "torch DDP gloo 2 procs",
                  f"the CNN job, {same}; dptrain's bn sums over the global batch, torch's bn is "
                  "each process's own (SyncBatchNorm needs CUDA); ratio = ours / torch samples/s"),
    ]


def micro_spec(args):
    """The RANKS:ARGS of the dptrain_cnn_bench run (bench.py --micro-run form)."""
    job = read_job(args.cnn_job)
    return (f"2:all --model {shlex.quote(job['model'])} --batch {job.get('batch-size', 128)} "
            f"--input {sample_shape(args.data)}")
