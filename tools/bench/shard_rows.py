#!/usr/bin/env python3
# Implements: the sharded-optimizer rows of tools/bench/run.sh (--shard, and
# the default full run unless --skip-shard): dptrain's step time with
# --shard-optimizer (ZeRO stage 1) against the same job without it, on 2 and
# 4 CPU ranks, A and B runs interleaved, medians; and the optimizer-state
# bytes per rank against P (1, 2, 4), with and without sharding, read from
# the start-up summary's memory line. Writes OUT/shard.md and OUT/shard.json;
# with --shard-flag=--shard-params the same rows for ZeRO stage 3 against
# the replicated run (OUT/shard_params.md, .json; target 1.25).
"""Sharded optimizer state (--shard-optimizer) against the unsharded step, on CPU ranks.

Rows (for each P of --shard-ranks, default 2,4):
  step time, P ranks   median ms per step with --shard-optimizer / without;
                       --repeats pairs of runs, the order inside each pair
                       alternating (A B, B A, ...) so that drift cancels; a run's
                       ms per step is the median of its train events after the
                       first --shard-skip ones (start-up, cache fill); the ratio
                       is the median of the per-pair ratios (target <= 1.05)
  per-phase ms         data, forward, backward, comm, optimizer of rank 0 (the
                       metrics' train events), medians over the steady events
                       of every repeat, A and B
  optimizer state      the memory line of the start-up summary, for P of
                       --shard-mem-ranks (default 1,2,4), both ways, against
                       state arrays x 4 B x ceil(N / P)

The model: by default an MLP (--shard-model, 3.16M parameters) with Adam
on synthetic data (--shard-data, made by tools/make_synthetic.py when
missing); or a job file (--shard-job, e.g. jobs/text_gpt.ini with
--shard-data data/fortunes.h5). One compute thread per rank, no validation,
no checkpoint. OMPI_MCA_mpi_yield_when_idle=1, so that oversubscribed
ranks (more ranks than cores) yield while they wait.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGET = 1.05
PHASES = ("data", "forward", "backward", "comm", "optimizer")
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_mpi_yield_when_idle": "1"}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
SIZE = r"([0-9.]+ (?:B|KiB|MiB|GiB|TiB))"


def log(msg):
    print(f"bench/shard: {msg}", file=sys.stderr, flush=True)


def to_bytes(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class Runner:
    def __init__(self, a):
        self.a = a
        self.dptrain = os.path.join(a.build_dir, "dptrain")

    def train(self, ranks, shard, steps):
        """One dptrain train run; its start-up summary and train events."""
        a = self.a
        with tempfile.TemporaryDirectory() as tmp:
            metrics = os.path.join(tmp, "metrics.jsonl")
            cmd = [a.mpiexec, "-n", str(ranks), "--oversubscribe", *shlex.split(a.mpiexec_args),
                   self.dptrain, "train", *(["--config", a.shard_job] if a.shard_job else []),
                   "--data", a.shard_data, "--device", "cpu", "--threads", "1", "--val-set", "",
                   "--save", "", "--steps", str(steps), "--log-every", str(a.shard_log_every),
                   "--metrics", metrics, "--seed", "1"]
            if not a.shard_job:
                cmd += ["--model", a.shard_model, "--batch-size", str(a.shard_batch),
                        "--optimizer", "adam"]
            if shard:
                cmd.append(a.shard_flag)
            cmd += shlex.split(a.shard_extra)
            t0 = time.perf_counter()
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=dict(os.environ, **ENV), timeout=a.timeout, cwd=ROOT)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}:\n"
                                   f"{(p.stdout + p.stderr)[-2000:]}")
            events = [json.loads(line) for line in open(metrics)]
        out = p.stdout
        mem = re.search(r"memory per rank: (.*)", out)
        batch = re.search(r"; batch (\d+) ", out)
        params = re.search(r"\((\d+) parameters\)", out)
        gemm = re.search(r"dptrain: GEMM ([^\n]*)", out)
        mpi = re.search(r"device cpu, [^,]*, ([^,]*),", out)
        if not (mem and batch and params):
            raise RuntimeError(f"no start-up summary in the output of {shlex.join(cmd)}:\n{out[-2000:]}")
        state = re.search(r"optimizer state " + SIZE, mem.group(1))
        whole = re.search(r"\(slice 1/\d+ of " + SIZE + r"\)", mem.group(1))
        total = re.search(r"; total " + SIZE, mem.group(1))
        batch = int(batch.group(1))
        train = [e for e in events if e.get("event") == "train"]
        steady = train[self.a.shard_skip:]
        return {"cmd": shlex.join(cmd), "ranks": ranks, "shard": shard, "wall_s": round(wall, 2),
                "params": int(params.group(1)), "batch": batch, "memory_line": mem.group(1),
                "state": state.group(1) if state else None,
                "state_whole": whole.group(1) if whole else (state.group(1) if state else None),
                "total": total.group(1) if total else None,
                "gemm": gemm.group(1).strip() if gemm else None,
                "mpi": mpi.group(1).strip() if mpi else None,
                # ms per step of each steady train event: its interval's wall time / steps
                "step_ms": [1000.0 * batch / e["samples_per_s"] for e in steady if e.get("samples_per_s")],
                "phases_ms": [e["ms"] for e in steady if "ms" in e]}


def steady_ms(run):
    if not run["step_ms"]:
        raise RuntimeError("no steady train events: raise --shard-steps or lower --shard-skip")
    return statistics.median(run["step_ms"])


def phase_medians(runs):
    events = [e for r in runs for e in r["phases_ms"]]
    return {p: statistics.median(e.get(p, 0.0) for e in events) for p in PHASES} if events else {}


def step_row(runner, ranks, repeats, steps):
    """Interleaved A (unsharded) / B (--shard-optimizer) runs on `ranks` ranks."""
    a_runs, b_runs, ratios = [], [], []
    t0 = time.perf_counter()
    for i in range(repeats):
        order = (False, True) if i % 2 == 0 else (True, False)
        pair = {}
        for shard in order:
            pair[shard] = runner.train(ranks, shard, steps)
            log(f"{ranks} ranks, repeat {i + 1}/{repeats}, {'sharded  ' if shard else 'unsharded'}: "
                f"{steady_ms(pair[shard]):.2f} ms/step ({pair[shard]['wall_s']:.1f} s)")
        a_runs.append(pair[False])
        b_runs.append(pair[True])
        ratios.append(steady_ms(pair[True]) / steady_ms(pair[False]))
    over = ranks > cores()
    return {"row": f"step time, {ranks} ranks" + (f" (oversubscribed: {ranks} ranks on {cores()} cores)"
                                                  if over else ""),
            "ranks": ranks, "cores": cores(), "oversubscribed": over,
            "unsharded_ms": statistics.median(steady_ms(r) for r in a_runs),
            "sharded_ms": statistics.median(steady_ms(r) for r in b_runs),
            "ratio": statistics.median(ratios), "ratios": ratios, "target": f"<= {TARGET}",
            "met": statistics.median(ratios) <= TARGET,
            "phases_unsharded": phase_medians(a_runs), "phases_sharded": phase_medians(b_runs),
            "seconds": round(time.perf_counter() - t0, 1), "runs": a_runs + b_runs}


def memory_rows(runner, mem_ranks, step_rows):
    """The start-up memory line for each P, both ways; reuses the step rows' runs."""
    have = {}
    for row in step_rows:
        for r in row["runs"]:
            have.setdefault((r["ranks"], r["shard"]), r)
    rows = []
    for p in mem_ranks:
        for shard in (False, True):
            r = have.get((p, shard)) or runner.train(p, shard, 1)
            rows.append(r)
    return rows


def fmt_ratio(row):
    lo, hi = min(row["ratios"]), max(row["ratios"])
    return f"{row['ratio']:.3f} ({lo:.3f}–{hi:.3f})"


def met(row):
    r = row["ratio"]
    if r <= TARGET:
        return f"yes, by {100 * (TARGET - r) / TARGET:.0f}%"
    return f"**no**, {100 * (r / TARGET - 1):.1f}% over"


def write(a, header, step_rows, mem_rows, seconds):
    os.makedirs(a.out, exist_ok=True)
    flag = a.shard_flag
    title = "Sharded parameters" if flag == "--shard-params" else "Sharded optimizer state"
    md = [f"# {title} ({flag})", ""] + [f"- {h}" for h in header] + [
        "", f"| row | unsharded | {flag} | ratio sharded / unsharded (median, range) | target | met? |",
        "|---|---|---|---|---|---|"]
    for r in step_rows:
        md.append(f"| {r['row']} | {r['unsharded_ms']:.2f} ms/step | {r['sharded_ms']:.2f} ms/step | "
                  f"{fmt_ratio(r)} | {r['target']} | {met(r)} |")
    md += ["", "Rank 0's ms per step by phase (medians of the steady train events of every repeat):", "",
           "| ranks | run | " + " | ".join(PHASES) + " | sum |", "|---|---|" + "---|" * (len(PHASES) + 1)]
    for r in step_rows:
        for name, key in (("unsharded", "phases_unsharded"), ("sharded", "phases_sharded")):
            ph = r[key]
            md.append(f"| {r['ranks']} | {name} | " + " | ".join(f"{ph.get(p, 0):.2f}" for p in PHASES) +
                      f" | {sum(ph.values()):.2f} |")
    md += ["", "Optimizer state per rank (start-up summary) against state arrays × 4 B × ceil(N / P):", "",
           f"| P | unsharded | {flag} | expected sharded | total per rank (unsharded → sharded) |",
           "|---|---|---|---|---|"]
    by = {(r["ranks"], r["shard"]): r for r in mem_rows}
    for p in sorted({r["ranks"] for r in mem_rows}):
        u, s = by[(p, False)], by[(p, True)]
        n = u["params"]
        arrays = round(to_bytes(u["state_whole"]) / (4 * n)) if u["state_whole"] else 0
        expect = arrays * 4 * -(-n // p)
        md.append(f"| {p} | {u['state']} | {s['state']} | {expect:,} B ({expect / 2**20:.3g} MiB) | "
                  f"{u['total']} → {s['total']} |")
    md += ["", f"The whole set of rows took {seconds:.0f} s."]
    text = "\n".join(md) + "\n"
    name = "shard_params" if flag == "--shard-params" else "shard"
    with open(os.path.join(a.out, name + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump({"header": header, "step_rows": step_rows,
                   "memory": [{k: r[k] for k in ("ranks", "shard", "params", "state", "state_whole",
                                                 "total", "memory_line")} for r in mem_rows]},
                  f, indent=1)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results"), help="writes shard.md, shard.json")
    ap.add_argument("--repeats", type=int, default=5, help="pairs of runs (unsharded, sharded) per row")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mpiexec-args", default="", help="extra mpiexec arguments")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--shard-ranks", default="2,4", help="P of the step-time rows")
    ap.add_argument("--shard-flag", default="--shard-optimizer", choices=["--shard-optimizer", "--shard-params"],
                    help="the B runs' strategy (--shard-params writes shard_params.md and .json)")
    ap.add_argument("--shard-mem-ranks", default="1,2,4", help="P of the memory rows")
    ap.add_argument("--shard-model", default="dense:1024,relu,dense:1024,relu,dense:1024,relu,dense:10",
                    help="the MLP (3.16M parameters on 1024 inputs), trained with Adam")
    ap.add_argument("--shard-batch", type=int, default=128, help="global batch of the MLP")
    ap.add_argument("--shard-job", help="a job file instead of the MLP (its model, batch, optimizer)")
    ap.add_argument("--shard-data", default=os.path.join(ROOT, "data", "shard_mlp.h5"),
                    help="training set (made by tools/make_synthetic.py when it is the default and missing)")
    ap.add_argument("--shard-steps", type=int, default=100, help="steps per run")
    ap.add_argument("--shard-log-every", type=int, default=10, help="steps per train event")
    ap.add_argument("--shard-skip", type=int, default=2, help="train events skipped at the start of a run")
    ap.add_argument("--shard-extra", default="", help="more dptrain train options, for A and B alike")
    a, _ = ap.parse_known_args()  # run.sh passes bench.py's options too
    global TARGET
    TARGET = 1.25 if a.shard_flag == "--shard-params" else 1.05  # the issues' targets
    a.shard_data = os.path.abspath(a.shard_data)
    if a.shard_job:
        a.shard_job = os.path.abspath(a.shard_job)
    default_data = os.path.join(ROOT, "data", "shard_mlp.h5")
    if not os.path.exists(a.shard_data):
        if a.shard_data != default_data:
            sys.exit(f"bench/shard: {a.shard_data} does not exist")
        os.makedirs(os.path.dirname(default_data), exist_ok=True)
        log(f"making {os.path.relpath(default_data, ROOT)} (8192 x 1024 uint8, 10 classes)")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_synthetic.py"), default_data + ".tmp",
                        "--n", "8192", "--val-n", "512", "--shape", "1024", "--classes", "10",
                        "--dtype", "uint8", "--seed", "1"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        os.replace(default_data + ".tmp", default_data)

    ranks = [int(x) for x in a.shard_ranks.split(",") if x]
    mem_ranks = [int(x) for x in a.shard_mem_ranks.split(",") if x]
    runner = Runner(a)
    t0 = time.perf_counter()
    load0 = load()
    over = [p for p in ranks if p > cores()]
    if over:
        log(f"{', '.join(map(str, over))} ranks on {cores()} cores: OVERSUBSCRIBED (ranks share cores; "
            "OMPI_MCA_mpi_yield_when_idle=1)")
    step_rows = [step_row(runner, p, a.repeats, a.shard_steps) for p in ranks]
    mem_rows = memory_rows(runner, mem_ranks, step_rows)
    seconds = time.perf_counter() - t0
    first = step_rows[0]["runs"][0] if step_rows else mem_rows[0]
    rel = lambda p: os.path.relpath(p, ROOT)
    model = (f"job {rel(a.shard_job)}" if a.shard_job else
             f"MLP `{a.shard_model}` with Adam, global batch {a.shard_batch}")
    header = [
        f"model: {model}, {first['params']:,} parameters, on {rel(a.shard_data)}; "
        f"{a.shard_steps} steps per run, a train event every {a.shard_log_every} steps, the first "
        f"{a.shard_skip} event(s) of each run skipped; {a.repeats} interleaved pairs per row",
        f"machine: {cpu_model()}, {cores()} cores; load average {load0:.1f} at the start, "
        f"{load():.1f} at the end; 1 compute thread per rank; OMPI_MCA_mpi_yield_when_idle=1",
        f"dptrain {commit()}; GEMM {first['gemm']}; {first['mpi']}",
    ]
    if over:
        header.append(f"OVERSUBSCRIBED: {', '.join(map(str, over))} ranks on {cores()} cores, so ranks "
                      "take turns on the cores; those rows measure the exchange and the optimizer under "
                      "time-slicing, not a machine with a core per rank")
    for r in step_rows:
        log(f"{r['row']}: {r['seconds']:.0f} s")
    print(write(a, header, step_rows, mem_rows, seconds), end="")


if __name__ == "__main__":
    main()
