#!/usr/bin/env python3
# Implements: the PyTorch side of test_torch_gpt.sh: the 2-block GPT that
# dptrain builds from SPEC, in torch.nn (Embedding, LayerNorm,
# MultiheadAttention(batch_first=True) with a causal attn_mask, Linear,
# GELU(approximate='tanh')) under the docs/design.md section 4 names, trained
# with AdamW in two parameter groups (decay on tensors of rank >= 2 only) and
# clip_grad_norm_, in float64, on the global batches in file order (dptrain
# --shuffle none, the last batch of an epoch smaller), so what differs from
# dptrain's float32 run is dptrain's rounding alone.
#   torch_gpt.py data OUT.h5 --n N --seed S        a token set /train/tokens
#   torch_gpt.py init OUT.h5 --seed S              initial weights, /model only
#   torch_gpt.py train DATA.h5 INIT.h5 OUT.h5 --lr LR --beta1 B1 --beta2 B2
#                --eps E --weight-decay WD --clip X --batch B --steps N
# OUT.h5 of `train` holds /model (float64), and per step: /loss (the global
# batch's mean loss), /grad_norm (before clipping, as clip_grad_norm_
# returned it), /key_bias_grad (the largest |gradient| of a key projection
# bias, rows D..2D of in_proj_bias, any block) and /grad_max (the largest
# |gradient| of any other tensor).
import argparse
import math
import sys

import h5py
import numpy as np
import torch
from torch import nn

VOCAB, T, D, HEADS, HIDDEN, BLOCKS = 23, 8, 16, 2, 32, 2
SPEC = (f"embed:{D},pos,{BLOCKS}*(res(ln,attn:{HEADS}:causal),"
        f"res(ln,dense:{HIDDEN},gelu:tanh,dense:{D})),ln,dense:{VOCAB}")
# What the network uses; the sensitivity checks of the test change these.
CAUSAL = True
GELU = "tanh"


def decays(p):  # --weight-decay-params matrices: tensors of rank >= 2
    return p.dim() >= 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_attn = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln_mlp = nn.LayerNorm(D)
        self.fc = nn.Linear(D, HIDDEN)
        self.proj = nn.Linear(HIDDEN, D)
        self.gelu = nn.GELU(approximate=GELU)

    def forward(self, x, mask):
        y = self.ln_attn(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.proj(self.gelu(self.fc(self.ln_mlp(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):  # [N, T] -> [N, T, VOCAB]
        t = ids.shape[1]
        x = self.embed(ids) + self.pos(torch.arange(t))
        # -inf above the diagonal: position t attends to positions <= t.
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1) if CAUSAL else None
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))

    # /model/<layer>/<tensor> (docs/design.md section 4) -> torch tensor. ln,
    # attn and dense count in spec order: block i has ln(2i), attn(i), ln(2i+1),
    # dense(2i), dense(2i+1); then the final ln and the head.
    def by_design_name(self):
        out = {"embed0/weight": self.embed.weight, "pos0/weight": self.pos.weight}

        def ln(i, m):
            out[f"ln{i}/weight"], out[f"ln{i}/bias"] = m.weight, m.bias

        def dense(i, m):
            out[f"dense{i}/weight"], out[f"dense{i}/bias"] = m.weight, m.bias

        for i, b in enumerate(self.blocks):
            ln(2 * i, b.ln_attn)
            ln(2 * i + 1, b.ln_mlp)
            out[f"attn{i}/in_proj_weight"] = b.attn.in_proj_weight
            out[f"attn{i}/in_proj_bias"] = b.attn.in_proj_bias
            out[f"attn{i}/out_proj/weight"] = b.attn.out_proj.weight
            out[f"attn{i}/out_proj/bias"] = b.attn.out_proj.bias
            dense(2 * i, b.fc)
            dense(2 * i + 1, b.proj)
        ln(2 * BLOCKS, self.ln_f)
        dense(2 * BLOCKS, self.head)
        return out


def data(args):
    # A random Markov chain with a few likely successors per token, cut into
    # windows of T+1 tokens that overlap by one (as tools/convert_text.py):
    # something to learn, so the loss moves.
    rng = np.random.default_rng(args.seed)
    logits = rng.normal(size=(VOCAB, VOCAB)) * 2.0
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    seq = [int(rng.integers(VOCAB))]
    for _ in range(args.n * T):
        seq.append(int(rng.choice(VOCAB, p=p[seq[-1]])))
    seq = np.array(seq, dtype=np.int32)
    windows = np.stack([seq[i * T:i * T + T + 1] for i in range(args.n)])
    with h5py.File(args.out, "w") as f:
        f["train/tokens"] = windows
        f["train/tokens"].attrs["vocab_size"] = VOCAB


def init(args):
    torch.manual_seed(args.seed)
    net = GPT()
    with torch.no_grad():  # biases and norm parameters away from torch's 0 / 1, so a swap shows
        for name, t in net.by_design_name().items():
            if name.endswith("bias"):
                t.uniform_(-0.2, 0.2)
            elif name.startswith("ln"):
                t.uniform_(0.7, 1.3)
    with h5py.File(args.out, "w") as f:
        for path, t in net.by_design_name().items():
            f[f"model/{path}"] = t.detach().numpy().astype(np.float32)


def train(args):
    torch.set_default_dtype(torch.float64)
    net = GPT()
    with h5py.File(args.init, "r") as f, torch.no_grad():
        for path, t in net.by_design_name().items():
            t.copy_(torch.from_numpy(f[f"model/{path}"][...].astype(np.float64)))
    with h5py.File(args.data, "r") as f:
        tokens = torch.from_numpy(f["train/tokens"][...].astype(np.int64))
    matrices = [p for p in net.parameters() if decays(p)]
    others = [p for p in net.parameters() if not decays(p)]
    groups = [{"params": matrices, "weight_decay": args.weight_decay},
              {"params": others, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    keys = [b.attn.in_proj_bias for b in net.blocks]
    n = tokens.shape[0]
    per_epoch = math.ceil(n / args.batch)
    loss_log, norms, key_grad, grad_max = [], [], [], []
    for step in range(args.steps):
        # --shuffle none: rows [s*B, s*B+B) of the epoch, the last batch smaller.
        begin = (step % per_epoch) * args.batch
        w = tokens[begin:min(n, begin + args.batch)]
        opt.zero_grad()
        logits = net(w[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), w[:, 1:].reshape(-1))
        loss.backward()
        loss_log.append(float(loss))
        key_grad.append(max(float(k.grad[D:2 * D].abs().max()) for k in keys))
        rest = [float(p.grad.abs().max()) for p in net.parameters() if all(p is not k for k in keys)]
        rest += [float(torch.cat([k.grad[:D], k.grad[2 * D:]]).abs().max()) for k in keys]
        grad_max.append(max(rest))
        norms.append(float(nn.utils.clip_grad_norm_(net.parameters(), args.clip)))
        opt.step()
    with h5py.File(args.out, "w") as f:
        for path, t in net.by_design_name().items():
            f[f"model/{path}"] = t.detach().numpy()
        f["loss"] = np.array(loss_log)
        f["grad_norm"] = np.array(norms)
        f["key_bias_grad"] = np.array(key_grad)
        f["grad_max"] = np.array(grad_max)


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("out")
    d.add_argument("--n", type=int, required=True)
    d.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("init")
    a.add_argument("out")
    a.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    for name in ("data", "init", "out"):
        t.add_argument(name)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--beta1", type=float, required=True)
    t.add_argument("--beta2", type=float, required=True)
    t.add_argument("--eps", type=float, required=True)
    t.add_argument("--weight-decay", type=float, required=True)
    t.add_argument("--clip", type=float, required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    args = ap.parse_args(argv)
    {"data": data, "init": init, "train": train}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
