#!/usr/bin/env python3
# Implements: the PyTorch rows of tools/gpu-check.sh. Reads the metrics of
# the 1-GPU training runs (WORK/PRECISION.jsonl) and prints tab-separated
# rows (section, check, result, detail): the step time of dptrain against
# PyTorch eager on the same MLP (784-256-256-10, batch 128, Adam; autocast
# for bf16), dptrain's device-timed forward+backward against the step's 8
# GEMMs called bare through torch.matmul, and the share of the step spent
# waiting for data. Without PyTorch (or without a GPU) it prints the
# dptrain-only rows and says why the others are missing.
#   gpu-check-torch.py WORK
# The GPT rows (tools/gpu-check-gpt.sh): the GPT of dptrain's spec
# embed:D,pos,L*(res(ln,attn:H:causal),res(ln,dense:4D,gelu:tanh,dense:D)),ln,dense:V
# in PyTorch eager (bf16 autocast, AdamW, clip_grad_norm_), its tokens/s
# and model FLOP utilization, counted as dptrain_gpt_bench counts them
# (6 N + 12 L T D per token, N without the token and position tables),
# and dptrain's tokens/s (--dptrain) against it:
#   gpu-check-torch.py gpt --shape L,H,D,T,V --batch B [--steps N] [--warmup N]
#                          [--peak TFLOPS] [--dptrain TOKENS_PER_S] [--compile]
# --compile: the strongest PyTorch peer instead of eager, the same model
# through torch.compile and torch.optim.AdamW(fused=True) (where the device
# has it), its compile time (the first step) apart from the timed steps;
# where torch.compile is missing (torch before 2.0) or fails, its row says
# "skipped" or "failed" and why, and the script still exits 0.
# The attention rows: torch.nn.functional.scaled_dot_product_attention,
# causal, forward and backward in bf16 on q, k, v [N, H, T, hd], with its
# cuDNN and its flash backend (each "skipped" and why where this torch or
# GPU has none), the milliseconds per pass as the result:
#   gpu-check-torch.py attention --shapes N,H,T,hd[/N,H,T,hd...] [--steps N]
# DPTRAIN_TORCH_DEVICE=cpu runs the PyTorch side on the CPU instead (for
# the check's run on the emulated GPU, tests/emulated/: the rows' code runs,
# their figures mean nothing).
import json
import os
import statistics
import sys
import time

B, SIZES = 128, [784, 256, 256, 10]
DEVICE = os.environ.get("DPTRAIN_TORCH_DEVICE", "cuda")
PRECISIONS = ["fp32", "tf32", "bf16"]


def row(check, result, detail):
    print(f"speed\t{check}\t{result}\t{detail}")


def dptrain_stats(work, precision):
    path = os.path.join(work, precision + ".jsonl")
    if not os.path.exists(path):
        return None
    events = [json.loads(line) for line in open(path) if line.strip()]
    train = [e for e in events if e.get("event") == "train"][1:]  # the first interval holds start-up
    if not train:
        return None
    step_ms = 1000.0 * B / statistics.median(e["samples_per_s"] for e in train)
    ms = train[-1].get("ms", {})
    shares = [e["ms"].get("data", 0.0) / max(1e-9, sum(e["ms"].values())) for e in train if e.get("ms")]
    return step_ms, ms.get("forward", 0.0) + ms.get("backward", 0.0), statistics.median(shares or [0.0])


def synchronize(torch):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(torch, fn, iters, warmup=20):
    for _ in range(warmup):
        fn()
    synchronize(torch)
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(torch)
    return 1000.0 * (time.perf_counter() - t) / iters


def torch_step_ms(torch, precision):
    dev = torch.device(DEVICE)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    layers = []
    for i in range(3):
        layers.append(torch.nn.Linear(SIZES[i], SIZES[i + 1]))
        if i < 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(B, SIZES[0], device=dev)
    y = torch.randint(0, SIZES[-1], (B,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return timed(torch, step, 300)


def gemm_ms(torch, precision):
    # The 8 GEMMs of one dptrain step: 3 forward, 3 weight gradients, and the
    # 2 input gradients (none for the first layer).
    dev = torch.device(DEVICE)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dt = torch.bfloat16 if precision == "bf16" else torch.float32
    ops = []
    for i in range(3):
        fin, fout = SIZES[i], SIZES[i + 1]
        x = torch.rand(B, fin, device=dev, dtype=dt)
        w = torch.rand(fout, fin, device=dev, dtype=dt)
        dy = torch.rand(B, fout, device=dev, dtype=dt)
        ops += [(x, w.t()), (dy.t(), x)] + ([(dy, w)] if i > 0 else [])
    return timed(torch, lambda: [torch.matmul(a, b) for a, b in ops], 300)


def import_torch():
    """(torch or None, why not)."""
    try:
        import torch
        return torch, None if DEVICE == "cpu" or torch.cuda.is_available() else "PyTorch sees no GPU"
    except Exception as e:  # ImportError, or OSError from a library torch loads
        return None, f"no PyTorch ({type(e).__name__}: {str(e)[:160]})"


def main():
    if sys.argv[1:2] == ["gpt"]:
        return gpt_main(sys.argv[2:])
    if sys.argv[1:2] == ["attention"]:
        return attention_main(sys.argv[2:])
    work = sys.argv[1]
    torch, why = import_torch()
    for p in PRECISIONS:
        d = dptrain_stats(work, p)
        if d is None:
            row(f"{p} step: dptrain vs PyTorch eager", "n/a", "no dptrain run on the GPU")
            continue
        row(f"{p} data wait share of the step", f"{d[2]:.3f}", "host wait for the shard / step (dptrain metrics)")
        if why:
            row(f"{p} step: dptrain vs PyTorch eager", "skipped", f"dptrain {d[0]:.3f} ms; {why}")
            continue
        t, g = torch_step_ms(torch, p), gemm_ms(torch, p)
        row(f"{p} step: dptrain vs PyTorch eager", f"{t / d[0]:.2f}",
            f"PyTorch/dptrain step time: dptrain {d[0]:.3f} ms, PyTorch {t:.3f} ms "
            f"(torch {torch.__version__} on {DEVICE})")
        row(f"{p} fwd+bwd vs bare GEMMs (torch.matmul)", f"{d[1] / g:.2f}" if g > 0 else "n/a",
            f"dptrain fwd+bwd {d[1]:.3f} ms (device events), 8 GEMMs {g:.3f} ms")


# --- the GPT rows ---------------------------------------------------------------------


def gpt_model(torch, L, H, D, T, V):
    """dptrain's GPT of the header in torch.nn: nn.Embedding, a learned [T, D]
    position table, pre-norm blocks (LayerNorm, causal self-attention with
    an in-projection [3D, D] and an out-projection [D, D], both with biases,
    as nn.MultiheadAttention's; LayerNorm, Linear D->4D, GELU tanh, Linear
    4D->D), LayerNorm and an untied Linear head, so the parameter count is
    dptrain's. Attention through scaled_dot_product_attention(is_causal=True)
    where this torch has it (2.0 and later), else softmax(q kT / sqrt(hd) +
    mask) v."""
    nn, F = torch.nn, torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1), persistent=False)

        def forward(self, x):
            n = x.shape[0]
            q, k, v = self.qkv(x).view(n, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
            if sdpa is not None:
                o = sdpa(q, k, v, is_causal=True)
            else:
                o = torch.softmax(q @ k.transpose(-1, -2) * (D // H) ** -0.5 + self.mask, -1) @ v
            return self.out(o.transpose(1, 2).reshape(n, T, D))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(D), Attention(), nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Embedding(V, D), nn.Parameter(torch.randn(T, D) * 0.02)
            self.blocks = nn.Sequential(*[Block() for _ in range(L)])
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V)

        def forward(self, ids):
            return self.head(self.ln(self.blocks(self.embed(ids) + self.pos)))

    return Gpt(), "scaled_dot_product_attention" if sdpa is not None else "softmax(q kT) v"


def gpt_setup(torch, L, H, D, T, V, batch, fused):
    """The model on the device, its AdamW (fused=True when asked), a batch of
    token ids and labels, and the FLOPs per token as dptrain_gpt_bench counts."""
    dev = torch.device(DEVICE)
    torch.manual_seed(0)
    model, attention = gpt_model(torch, L, H, D, T, V)
    model = model.to(dev)
    params = sum(p.numel() for p in model.parameters())
    matmul = params - model.embed.weight.numel() - model.pos.numel()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    extra = {"fused": True} if fused else {}
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), **extra)
    ids = torch.randint(0, V, (batch, T), device=dev)
    labels = torch.randint(0, V, (batch * T,), device=dev)
    flops = 6.0 * matmul + 12.0 * L * T * D  # per token, as dptrain_gpt_bench counts
    return model, opt, ids, labels, (flops, matmul, params), attention


def gpt_step(torch, forward, model, opt, ids, labels, V):
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(forward(ids).view(-1, V).float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def gpt_rows(a, name, who, per_s, ms, counts, how):
    """The tokens/s and MFU row of `who` and dptrain's ratio to it."""
    flops, matmul, params = counts
    mfu = f"{per_s * flops / (a.peak * 1e12):.3g}" if a.peak > 0 else "peak unknown"
    row(f"{name}: tokens/s and MFU ({who}, batch {a.batch})", mfu,
        f"{per_s:,.0f} tokens/s, {ms:.4g} ms a step ({a.steps} after {a.warmup} warm-up); "
        f"{flops * 1e-6:.4g} MFLOP per token (6 N + 12 L T D, N = {matmul:,} of {params:,} parameters), "
        f"{per_s * flops * 1e-12:.3g} TFLOPS" + (f" of {a.peak:g}" if a.peak > 0 else "") + f"; {how}")
    if a.dptrain > 0:
        row(f"{name}: dptrain vs {who.split(',')[0]} tokens/s", f"{a.dptrain / per_s:.2f}",
            f"dptrain {a.dptrain:,.0f} tokens/s, PyTorch {per_s:,.0f} tokens/s; ratio = dptrain / PyTorch")


def gpt_compiled(torch, a, name, shape):
    """The compiled row: torch.compile of the model, fused AdamW; skipped or
    failed (with the reason) where this torch cannot."""
    who = "PyTorch torch.compile, fused AdamW"
    mfu_row = f"{name}: tokens/s and MFU ({who}, batch {a.batch})"
    if not hasattr(torch, "compile"):
        row(mfu_row, "skipped", f"torch {torch.__version__} has no torch.compile (2.0 and later have it)")
        return
    fused = DEVICE == "cuda"  # fused AdamW: CUDA tensors (CPU ones only from torch 2.4)
    try:
        model, opt, ids, labels, counts, attention = gpt_setup(torch, *shape, a.batch, fused)
        step = gpt_step(torch, torch.compile(model), model, opt, ids, labels, shape[4])
        t = time.perf_counter()
        step()  # compiles
        synchronize(torch)
        compile_s = time.perf_counter() - t
        ms = timed(torch, step, a.steps, max(0, a.warmup - 1))
    except Exception as e:  # a backend that cannot build (no compiler, no Triton), out of memory
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        row(mfu_row, "failed", f"torch {torch.__version__} on {DEVICE}: {why}")
        return
    how = (f"torch.compile (default mode; the first step, compile included, {compile_s:.1f} s), "
           f"AdamW {'fused=True' if fused else 'not fused (on ' + DEVICE + ')'}, autocast bf16, "
           f"clip_grad_norm_, attention by {attention}; torch {torch.__version__} on {DEVICE}")
    gpt_rows(a, name, who, a.batch * shape[3] / ms * 1e3, ms, counts, how)


def gpt_main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="gpu-check-torch.py gpt")
    ap.add_argument("--shape", required=True, help="L,H,D,T,V")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak", type=float, default=0.0, help="dense bf16 peak, TFLOPS (0: unknown)")
    ap.add_argument("--dptrain", type=float, default=0.0, help="dptrain's tokens/s, same shape")
    ap.add_argument("--name", help="the rows' name for the model (default: its shape)")
    ap.add_argument("--compile", action="store_true", help="torch.compile and fused AdamW, not eager")
    a = ap.parse_args(argv)
    shape = tuple(int(v) for v in a.shape.split(","))
    L, H, D, T, V = shape
    name = f"{a.name or f'GPT {L}x{D}, {H} heads, T {T}, V {V}'} bf16"
    torch, why = import_torch()
    if why:
        who = "PyTorch torch.compile, fused AdamW" if a.compile else "PyTorch eager"
        row(f"{name}: tokens/s and MFU ({who}, batch {a.batch})", "skipped", why)
        return
    if a.compile:
        return gpt_compiled(torch, a, name, shape)
    model, opt, ids, labels, counts, attention = gpt_setup(torch, *shape, a.batch, False)
    ms = timed(torch, gpt_step(torch, model, model, opt, ids, labels, V), a.steps, a.warmup)
    gpt_rows(a, name, "PyTorch eager", a.batch * T / ms * 1e3, ms, counts,
             f"autocast bf16, AdamW, clip_grad_norm_, attention by {attention}; "
             f"torch {torch.__version__} on {DEVICE}")


# --- the attention rows ------------------------------------------------------------------


def sdpa_backends(torch):
    """[(name, context manager factory or None)]: cudnn and flash on a GPU,
    where this torch has them; the default backend on the CPU."""
    if DEVICE != "cuda":
        return [("default backend", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("default backend", None)]
    found = []
    for name, attr in (("cuDNN", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION")):
        if hasattr(SDPBackend, attr):
            found.append((name, lambda b=getattr(SDPBackend, attr): sdpa_kernel(b)))
    return found


def attention_main(argv):
    import argparse
    import contextlib
    ap = argparse.ArgumentParser(prog="gpu-check-torch.py attention")
    ap.add_argument("--shapes", required=True, help="N,H,T,hd[/N,H,T,hd...]")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in a.shapes.split("/")]
    torch, why = import_torch()
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None) if torch else None
    if torch and f is None:
        why = f"torch {torch.__version__} has no scaled_dot_product_attention (2.0 and later)"
    for n, h, t, hd in shapes:
        name = f"attention core fwd+bwd, one causal layer (N {n}, H {h}, T {t}, hd {hd}; PyTorch SDPA"
        if why:
            row(f"{name})", "skipped", why)
            continue
        q, k, v = (torch.randn(n, h, t, hd, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(n, h, t, hd, device=DEVICE, dtype=torch.bfloat16)
        for backend, context in sdpa_backends(torch):
            def step():
                with context() if context else contextlib.nullcontext():
                    f(q, k, v, is_causal=True).backward(dout)
            try:
                ms = timed(torch, step, a.steps, warmup=3)
            except Exception as e:  # this GPU or shape has no such kernel
                row(f"{name} {backend}, bf16)", "skipped", f"{type(e).__name__}: {str(e)[:160]}")
                continue
            row(f"{name} {backend}, bf16)", f"{ms:.4g}",
                f"ms per forward and backward, mean of {a.steps} after 3 warm-up; torch {torch.__version__} on {DEVICE}")


if __name__ == "__main__":
    main()
