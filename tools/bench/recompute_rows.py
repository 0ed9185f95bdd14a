#!/usr/bin/env python3
# Implements: the recomputation rows of tools/bench/run.sh (--recompute, and
# the default full run unless --skip-recompute): dptrain's step time with
# --recompute blocks against the same job without it (A and B runs
# interleaved, medians), the activation memory of both from the start-up
# line and the measured high-water mark of the summary event, and the plan
# (train --plan-only) of a GPT-2-small-shaped model at batch 16. Writes
# OUT/recompute.md and OUT/recompute.json.
"""Activation recomputation (--recompute blocks) against the plain step, on one CPU rank.

Rows:
  step time          median ms per step with --recompute blocks / without, over
                     --repeats interleaved pairs (target <= 1.4: one more forward)
  memory, the job    activations kept for backward and in all (start-up line),
                     measured peak of the backend's buffers (summary event), both ways
  plan, GPT-2 small  --plan-only of embed:768,pos,12*(...),ln,dense:50304 at T 1024,
                     batch 16 on one rank: kept activations both ways (target <= 0.3x)
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from shard_rows import ENV, SIZE, commit, cores, cpu_model, load, to_bytes  # noqa: E402

STEP_TARGET, KEPT_TARGET = 1.4, 0.3
GPT2 = ("embed:768,pos,12*(res(ln,attn:12:causal),res(ln,dense:3072,gelu:tanh,dense:768)),ln,"
        "dense:50304")


def log(msg):
    print(f"bench/recompute: {msg}", file=sys.stderr, flush=True)


def dptrain(a, args, metrics=None):
    cmd = [a.mpiexec, "-n", "1", os.path.join(a.build_dir, "dptrain"), "train", *args]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, **ENV), timeout=a.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-2000:]}")
    return shlex.join(cmd), p.stdout


def job_run(a, recompute):
    """One run of the job; ms per steady step, its memory line and summary."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        args = ["--config", a.job, "--data", a.data, "--device", "cpu", "--threads", str(a.threads),
                "--val-set", "", "--save", "", "--steps", str(a.steps), "--log-every", "10",
                "--metrics", metrics, "--seed", "1"] + (["--recompute", "blocks"] if recompute else [])
        cmd, out = dptrain(a, args)
        events = [json.loads(line) for line in open(metrics)]
    batch = int(re.search(r"; batch (\d+) ", out).group(1))
    train = [e for e in events if e.get("event") == "train"][a.skip:]
    summary = [e for e in events if e.get("event") == "summary"][-1]
    mem = re.search(r"activations " + SIZE + r" for (\d+) rows \(" + SIZE + " kept for backward", out)
    return {"cmd": cmd, "ms": statistics.median(1000.0 * batch / e["samples_per_s"] for e in train),
            "activations": mem.group(1), "rows": int(mem.group(2)), "kept": mem.group(3),
            "memory_mib": summary["memory_mib"]}


def plan_gpt2(a):
    """--plan-only of the GPT-2-small shape at batch 16, on a token set of T 1024."""
    import h5py  # the bench's python has it (tools/bench/install.sh)
    import numpy as np
    path = os.path.join(ROOT, "data", "plan_gpt2.h5")
    if not os.path.exists(path):
        with h5py.File(path + ".tmp", "w") as f:
            d = f.create_dataset("train/tokens", data=np.zeros((16, 1025), np.uint16))
            d.attrs["vocab_size"] = 50304
        os.replace(path + ".tmp", path)
    cmd, out = dptrain(a, ["--data", path, "--val-set", "", "--model", GPT2, "--batch-size", "16",
                           "--optimizer", "adamw", "--device", "cpu", "--plan-only", "--fit-gib", "80"])
    m = re.search(r"kept for backward " + SIZE + r", with --recompute blocks " + SIZE + r" \(([0-9.]+)x\); "
                  r"workspace " + SIZE + r", with --recompute blocks " + SIZE, out)
    fits = re.findall(r"in 80 GiB(?: with --recompute blocks)?: (\d+) rows", out)
    return {"cmd": cmd, "kept": m.group(1), "kept_recompute": m.group(2), "ratio": float(m.group(3)),
            "workspace": m.group(4), "workspace_recompute": m.group(5), "fit_80gib": fits,
            "plan": [l for l in out.splitlines() if "memory plan" in l or l.startswith("dptrain:   ")]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results"))
    ap.add_argument("--repeats", type=int, default=3, help="pairs of runs (plain, recomputed)")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--recompute-job", dest="job", default=os.path.join(ROOT, "jobs", "text_gpt.ini"))
    ap.add_argument("--recompute-data", dest="data", default=os.path.join(ROOT, "data", "fortunes.h5"))
    ap.add_argument("--recompute-steps", dest="steps", type=int, default=60)
    ap.add_argument("--recompute-skip", dest="skip", type=int, default=1, help="train events skipped")
    ap.add_argument("--recompute-threads", dest="threads", type=int, default=cores())
    a, _ = ap.parse_known_args()  # run.sh passes bench.py's options too
    t0, load0 = time.perf_counter(), load()
    pairs = []
    for i in range(a.repeats):
        pair = {}
        for recompute in ((False, True) if i % 2 == 0 else (True, False)):
            pair[recompute] = job_run(a, recompute)
            log(f"repeat {i + 1}/{a.repeats}, {'recomputed' if recompute else 'plain     '}: "
                f"{pair[recompute]['ms']:.1f} ms/step")
        pairs.append(pair)
    ratios = [p[True]["ms"] / p[False]["ms"] for p in pairs]
    ratio = statistics.median(ratios)
    plan = plan_gpt2(a)
    plain, rec = pairs[0][False], pairs[0][True]
    rel = lambda p: os.path.relpath(p, ROOT)
    md = ["# Activation recomputation (--recompute blocks)", "",
          f"- job {rel(a.job)} on {rel(a.data)}, one rank, {a.threads} thread(s), {a.steps} steps a run, "
          f"the first {a.skip} train event(s) skipped; {a.repeats} interleaved pairs",
          f"- machine: {cpu_model()}, {cores()} cores; load {load0:.1f} at the start, {load():.1f} at the end",
          f"- dptrain {commit()}", "",
          "| row | plain | --recompute blocks | ratio | target | met? |", "|---|---|---|---|---|---|",
          f"| step time (median, range {min(ratios):.3f}–{max(ratios):.3f}) | "
          f"{statistics.median(p[False]['ms'] for p in pairs):.1f} ms | "
          f"{statistics.median(p[True]['ms'] for p in pairs):.1f} ms | {ratio:.3f} | <= {STEP_TARGET} | "
          f"{'yes' if ratio <= STEP_TARGET else '**no**'} |",
          f"| activations kept for backward, {plain['rows']} rows | {plain['kept']} | {rec['kept']} | "
          f"{to_bytes(rec['kept']) / to_bytes(plain['kept']):.3f} | <= {KEPT_TARGET} | "
          f"{'yes' if to_bytes(rec['kept']) <= KEPT_TARGET * to_bytes(plain['kept']) else '**no**'} |",
          f"| activations in all (kept + workspace) | {plain['activations']} | {rec['activations']} | "
          f"{to_bytes(rec['activations']) / to_bytes(plain['activations']):.3f} | | |",
          f"| measured peak of the backend's buffers | {plain['memory_mib']['peak_buffers']:.1f} MiB | "
          f"{rec['memory_mib']['peak_buffers']:.1f} MiB | "
          f"{rec['memory_mib']['peak_buffers'] / plain['memory_mib']['peak_buffers']:.3f} | | |",
          f"| measured peak host memory (ru_maxrss) | {plain['memory_mib']['peak_host']:.1f} MiB | "
          f"{rec['memory_mib']['peak_host']:.1f} MiB | | | |",
          f"| plan, GPT-2 small at batch 16 (cpu: math attention): kept | {plan['kept']} | "
          f"{plan['kept_recompute']} | {plan['ratio']:.2f} | <= {KEPT_TARGET} | "
          f"{'yes' if plan['ratio'] <= KEPT_TARGET else '**no**'} |",
          f"| plan, GPT-2 small: workspace | {plan['workspace']} | {plan['workspace_recompute']} | | | |",
          f"| plan, GPT-2 small: largest batch per rank in 80 GiB | {plan['fit_80gib'][0]} | "
          f"{plan['fit_80gib'][1]} | | | |", "",
          "The GPT-2 plan:", "", "```", *plan["plan"], "```", "",
          f"The rows took {time.perf_counter() - t0:.0f} s."]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "recompute.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "recompute.json"), "w") as f:
        json.dump({"ratios": ratios, "pairs": pairs, "plan": plan}, f, indent=1)
    print("\n".join(md))


if __name__ == "__main__":
    main()
