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


def timed(torch, fn, iters):
    for _ in range(20):
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


def main():
    work = sys.argv[1]
    try:
        import torch
        why = None if DEVICE == "cpu" or torch.cuda.is_available() else "PyTorch sees no GPU"
    except Exception as e:  # ImportError, or OSError from a library torch loads
        torch, why = None, f"no PyTorch ({type(e).__name__}: {str(e)[:160]})"
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


if __name__ == "__main__":
    main()
