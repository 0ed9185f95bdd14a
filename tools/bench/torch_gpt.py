#!/usr/bin/env python3
# Implements: the PyTorch baseline of tools/bench's GPT rows: the sequence
# model a dptrain --model spec describes (by default the job of --config,
# jobs/text_gpt.ini: embed, pos, pre-norm res blocks of ln + causal attn and
# ln + dense/gelu:tanh/dense, ln, dense) built from torch.nn, trained on a
# token set with AdamW (two parameter groups: decay on the matrices) and
# clip_grad_norm_, eager in one process or DDP (gloo) over processes, with
# the batching of torch_mlp.py; prints one JSON line with the timed
# samples/s and tokens/s.
"""PyTorch CPU baseline for the GPT rows of tools/bench/bench.py.

  torch_gpt.py --data data/fortunes.h5 --config jobs/text_gpt.ini --mode eager
  torch_gpt.py --data data/fortunes.h5 --config jobs/text_gpt.ini --mode ddp --ranks 2

Layers: embed:D (nn.Embedding), pos (learned positions, a [T, D]
parameter), ln (nn.LayerNorm), attn:H[:causal]
(nn.MultiheadAttention(D, H, batch_first=True) with a boolean causal
attn_mask), dense:N (nn.Linear on the last dimension), gelu[:tanh]
(nn.GELU(approximate='tanh')), relu, res(L,...) (x + f(x)) and K*(L,...).
The data: /<set>/tokens [N, T+1] of a token set, ids tokens[:, :T] and
next-token labels tokens[:, 1:], cross-entropy over every position.
Optimizer: AdamW at the job's lr, betas (beta1, beta2), eps, weight decay on
the tensors of rank >= 2 only (--weight-decay-params matrices) or on all,
and clip_grad_norm_ as the job says. The job's learning-rate schedule is
not run (a scalar per step; it does not change the cost).
"""
import argparse
import configparser
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp  # noqa: E402  (batching and the DDP plumbing; exits with advice without torch)
from torch_mlp import dist, h5py, json, mp, nn, time, torch  # noqa: E402


def split_top(spec):
    """Comma-separated tokens of spec, commas inside parentheses kept."""
    tokens, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            tokens.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur.strip():
        tokens.append(cur.strip())
    return tokens


class Positions(nn.Module):
    """dptrain's pos: a learned [T, D] table added to every sequence."""

    def __init__(self, tokens, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(tokens, dim) * 0.02)

    def forward(self, x):
        return x + self.weight


class Attention(nn.Module):
    """dptrain's attn:H[:causal], self-attention through nn.MultiheadAttention."""

    def __init__(self, tokens, dim, heads, causal):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)
        # A plain attribute, not a buffer: DDP's gloo broadcast of buffers takes no bool.
        self.mask = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), diagonal=1) if causal else None

    def forward(self, x):
        return self.mha(x, x, x, attn_mask=self.mask, need_weights=False)[0]


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


def build(spec, tokens, vocab):
    """(nn.Sequential, output width) of spec on token ids [N, tokens]."""
    def layers(spec, dim):
        mods = []
        for token in split_top(spec):
            if "*(" in token and token.split("*", 1)[0].strip().isdigit():
                times, inner = token.split("*", 1)
                for _ in range(int(times)):
                    more, dim = layers(inner.strip()[1:-1], dim)
                    mods += more
                continue
            if token.startswith("res(") and token.endswith(")"):
                body, out = layers(token[4:-1], dim)
                if out != dim:
                    sys.exit(f"{sys.argv[0]}: '{token}' changes the width ({dim} -> {out})")
                mods.append(Residual(nn.Sequential(*body)))
                continue
            kind, *args = token.split(":")
            if kind == "embed":
                if dim is not None:
                    sys.exit(f"{sys.argv[0]}: embed must be the first layer")
                dim = int(args[0])
                mods.append(nn.Embedding(vocab, dim))
            elif dim is None:
                sys.exit(f"{sys.argv[0]}: the first layer must be embed:D")
            elif kind == "pos":
                mods.append(Positions(tokens, dim))
            elif kind == "ln":
                mods.append(nn.LayerNorm(dim))
            elif kind == "attn":
                mods.append(Attention(tokens, dim, int(args[0]), args[1:] == ["causal"]))
            elif kind == "dense":
                mods.append(nn.Linear(dim, int(args[0])))
                dim = int(args[0])
            elif kind == "gelu":
                mods.append(nn.GELU(approximate="tanh" if args == ["tanh"] else "none"))
            elif kind == "relu":
                mods.append(nn.ReLU())
            else:
                sys.exit(f"{sys.argv[0]}: layer '{token}' not supported by this baseline")
        return mods, dim

    mods, width = layers(spec, None)
    return nn.Sequential(*mods), width


def load_tokens(path, set_name):
    """ids [N, T] and next-token labels [N, T], int64."""
    with h5py.File(path, "r") as f:
        t = torch.from_numpy(f[f"{set_name}/tokens"][...].astype("int64"))
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def make_optimizer(args, model):
    """AdamW with decay on the matrices (or on everything), as dptrain's."""
    params = [p for p in model.parameters() if p.requires_grad]
    if args.weight_decay_params == "matrices":
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": args.weight_decay}]
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}.get(args.optimizer)
    if cls is None:
        sys.exit(f"{sys.argv[0]}: optimizer '{args.optimizer}' not supported by this baseline")
    return cls(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def train(args, rank, ranks, model, x, y, vocab):
    """Warm-up steps, then --steps timed ones; returns (samples, seconds)."""
    opt = make_optimizer(args, model)
    loss_fn = nn.CrossEntropyLoss()
    it = torch_mlp.batches(len(x), args.batch, args.seed)
    model.train()

    def step(idx):
        mine = torch_mlp.shard(idx, rank, ranks)
        opt.zero_grad(set_to_none=True)
        logits = model(x[mine])
        loss = loss_fn(logits.reshape(-1, vocab), y[mine].reshape(-1))
        loss.backward()
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
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


def setup(args):
    x, y = load_tokens(args.data, args.set)
    model, width = build(args.model, x.shape[1], args.vocab)
    if width != args.vocab:
        sys.exit(f"{sys.argv[0]}: the model gives {width} outputs, the vocabulary is {args.vocab}")
    return model, x, y


def report(args, ranks, samples, seconds, model, tokens):
    print(json.dumps({"mode": args.mode, "ranks": ranks, "threads": torch.get_num_threads(),
                      "batch": args.batch, "tokens": tokens, "steps": args.steps,
                      "params": sum(p.numel() for p in model.parameters()),
                      "samples_per_s": samples / seconds, "tokens_per_s": samples * tokens / seconds,
                      "seconds": seconds, "torch": torch.__version__}), flush=True)


def ddp_worker(rank, args, port):
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    model, x, y = setup(args)
    ddp = nn.parallel.DistributedDataParallel(model)
    samples, seconds = train(args, rank, args.ranks, ddp, x, y, args.vocab)
    if rank == 0:
        report(args, args.ranks, samples, seconds, model, x.shape[1])
    dist.destroy_process_group()


def apply_job(args, ap):
    """The job file's model, batch and optimizer keys, unless given on the command line."""
    job = configparser.ConfigParser(inline_comment_prefixes=("#",))
    with open(args.config) as f:
        job.read_string("[job]\n" + f.read())
    keys = job["job"]
    for key, dest, cast in (("model", "model", str), ("batch-size", "batch", int),
                            ("lr", "lr", float), ("optimizer", "optimizer", str),
                            ("beta1", "beta1", float), ("beta2", "beta2", float), ("eps", "eps", float),
                            ("weight-decay", "weight_decay", float),
                            ("weight-decay-params", "weight_decay_params", str),
                            ("clip-grad-norm", "clip_grad_norm", float)):
        if key in keys and getattr(args, dest) == ap.get_default(dest):
            setattr(args, dest, cast(keys[key]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    torch_mlp.add_run_args(ap, batch=32, lr=1e-3, warmup=5, steps=20)
    ap.add_argument("--config", help="a dptrain job file: its model, batch-size and optimizer keys")
    ap.add_argument("--model", help="a dptrain --model spec (overrides the job's)")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary (default 256, bytes)")
    ap.add_argument("--optimizer", default="adamw", choices=("adam", "adamw"))
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--weight-decay-params", default="all", choices=("all", "matrices"))
    ap.add_argument("--clip-grad-norm", type=float, default=0.0)
    args = ap.parse_args()
    if args.config:
        apply_job(args, ap)
    if not args.model:
        ap.error("give --model SPEC or --config JOB")
    if args.mode == "eager":
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        torch.manual_seed(args.seed)
        model, x, y = setup(args)
        samples, seconds = train(args, 0, 1, model, x, y, args.vocab)
        report(args, 1, samples, seconds, model, x.shape[1])
    else:
        mp.spawn(ddp_worker, args=(args, torch_mlp.free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
