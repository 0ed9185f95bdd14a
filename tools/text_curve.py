#!/usr/bin/env python3
# Implements: the text demo's loss curve (docs/performance.md): the same GPT
# as jobs/text_gpt.ini trained by PyTorch eager for a given number of
# minutes on the same token set (its train loss and periodic test loss
# against wall time, as JSON Lines), the xz -9 line of the same text, and
# the plot of dptrain's metrics file against both.
#   text_curve.py torch DATA.h5 OUT.jsonl --minutes M [--threads N]
#   text_curve.py xz TEXT_DIR                      prints xz -9 in nats per byte
#   text_curve.py plot OUT.png --dptrain M.jsonl --torch T.jsonl --xz NATS
"""Loss against minutes: dptrain, PyTorch and xz on the fortunes corpus."""
import argparse
import json
import lzma
import math
import os
import sys
import time


def torch_run(args):
    import h5py
    import numpy as np
    import torch
    from torch import nn
    torch.manual_seed(1)
    torch.set_num_threads(args.threads)
    with h5py.File(args.data, "r") as f:
        train = torch.from_numpy(f["train/tokens"][()].astype(np.int64))
        test = torch.from_numpy(f["test/tokens"][()].astype(np.int64))
    t, d, heads, hidden, blocks, vocab = train.shape[1] - 1, 128, 4, 512, 4, 256

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"),
                                     nn.Linear(hidden, d))

        def forward(self, x, mask):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, ids):
            mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            x = self.embed(ids) + self.pos(torch.arange(t))
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.ln(x))

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    batch, warmup = 32, 200
    steps = args.steps
    lossf = nn.CrossEntropyLoss()

    def test_loss():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(test), 256):
                w = test[i:i + 256]
                total += lossf(model(w[:, :-1]).reshape(-1, vocab), w[:, 1:].reshape(-1)).item() * len(w)
        model.train()
        return total / len(test)

    out = open(args.out, "w")
    start, step, epoch_steps = time.monotonic(), 0, math.ceil(len(train) / batch)
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(len(train), generator=g)
    while time.monotonic() - start < args.minutes * 60 and step < steps:
        if step % epoch_steps == 0 and step:
            perm = torch.randperm(len(train), generator=g)
            out.write(json.dumps({"event": "eval", "minutes": (time.monotonic() - start) / 60,
                                  "step": step, "loss": test_loss()}) + "\n")
        i = step % epoch_steps
        w = train[perm[i * batch:(i + 1) * batch]]
        s = step
        lr = 3e-3 * (s + 1) / warmup if s < warmup else \
            3e-3 * 0.5 * (1 + math.cos(math.pi * min(s - warmup, steps - warmup) / (steps - warmup)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        loss = lossf(model(w[:, :-1]).reshape(-1, vocab), w[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            out.write(json.dumps({"event": "train", "minutes": (time.monotonic() - start) / 60,
                                  "step": step, "loss": loss.item()}) + "\n")
            out.flush()
    out.write(json.dumps({"event": "eval", "minutes": (time.monotonic() - start) / 60,
                          "step": step, "loss": test_loss()}) + "\n")
    seconds = time.monotonic() - start
    print(f"torch: {step} steps in {seconds / 60:.2f} min, {step * batch * t / seconds:.0f} tokens/s")


def xz_nats(args):
    data = b""
    for root, _, files in sorted(os.walk(args.text_dir)):
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.islink(path) or name.endswith(".dat"):
                continue
            data += open(path, "rb").read()
    packed = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    bits = 8 * len(packed) / len(data)
    print(f"{bits * math.log(2):.4f}")  # nats per byte
    print(f"xz -9e: {len(data)} bytes -> {len(packed)}: {bits:.3f} bits per byte", file=sys.stderr)


def plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def events(path, kind):
        return [json.loads(l) for l in open(path) if f'"{kind}"' in l]

    fig, ax = plt.subplots(figsize=(8, 4.8))
    ours = events(args.dptrain, "train")
    # dptrain's events carry steps; its summary the wall time of those steps.
    summary = events(args.dptrain, "summary")[-1]
    per_step = summary["wall_s"] / 60 / summary["steps"]
    ax.plot([e["step"] * per_step for e in ours], [e["loss"] for e in ours], "C0-", lw=1,
            label="dptrain, train (2 ranks)")
    ax.plot([e["step"] * per_step for e in events(args.dptrain, "eval")],
            [e["loss"] for e in events(args.dptrain, "eval")], "C0o-", label="dptrain, test")
    theirs = events(args.torch, "train")
    ax.plot([e["minutes"] for e in theirs], [e["loss"] for e in theirs], "C1-", lw=1,
            label="PyTorch eager, train (2 threads)")
    ax.plot([e["minutes"] for e in events(args.torch, "eval")],
            [e["loss"] for e in events(args.torch, "eval")], "C1s-", label="PyTorch eager, test")
    ax.axhline(args.xz, color="k", ls="--", lw=1, label=f"xz -9e ({args.xz:.2f} nats/byte)")
    ax.set_xlabel("minutes of training")
    ax.set_ylabel("loss, nats per byte")
    ax.set_ylim(1.0, 3.5)
    ax.legend()
    ax.set_title("GPT 4x128 (0.87M parameters), T = 64, fortunes, 2-core machine")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("data")
    t.add_argument("out")
    t.add_argument("--minutes", type=float, required=True)
    t.add_argument("--steps", type=int, default=9560, help="the schedule's length (the demo's)")
    t.add_argument("--threads", type=int, default=2)
    x = sub.add_parser("xz")
    x.add_argument("text_dir")
    p = sub.add_parser("plot")
    p.add_argument("out")
    p.add_argument("--dptrain", required=True)
    p.add_argument("--torch", required=True)
    p.add_argument("--xz", type=float, required=True)
    args = ap.parse_args()
    {"torch": torch_run, "xz": xz_nats, "plot": plot}[args.cmd](args)


if __name__ == "__main__":
    main()
