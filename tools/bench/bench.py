#!/usr/bin/env python3
# Implements: the bench driver: dptrain against the PyTorch CPU baselines
# (tools/bench/torch_mlp.py; the CNN job's rows in cnn_rows.py with
# torch_cnn.py; the GPT job's rows in gpt_rows.py with torch_gpt.py),
# repeated and interleaved, plus the rows of the dptrain_bench,
# dptrain_cnn_bench and dptrain_gpt_bench micro-benchmarks and the GEMM
# rates (gemm_rows.py); writes results.md, results.json, results.png
# (bench_report.py).
"""Benchmark dptrain against PyTorch on CPU.

Rows (median over --repeats; ratio = median of the per-repeat ratios):
  1 rank, 1 thread   dptrain 1 rank --threads 1       vs torch eager, 1 thread
  2 ranks DDP        mpiexec -n 2 dptrain --threads 1 vs torch DDP gloo, 2 x 1 thread
  weak scaling       dptrain 2 ranks batch 2B         vs 2 x dptrain 1 rank batch B
  data wait          ms.data / (sum of ms) of the 2-rank runs' train events (no baseline)
  CNN 1 rank / 2 ranks DDP  the same two for the job of --cnn-job, a fixed --cnn-steps
  GPT 1 rank / 2 ranks DDP  the same two for the job of --gpt-job on the token set
                     of --gpt-data, in tokens/s (torch_gpt.py), and the demo job's
                     tokens/s on 2 ranks against twice its 1-rank rate
plus every JSON line {"row":..} that BUILD_DIR/tools/bench/dptrain_bench
(or --micro BIN), dptrain_cnn_bench (conv layers vs bare oneDNN, bn's
collectives) and dptrain_gpt_bench (the GPT step vs its GEMMs replayed, its
time per layer family) print, as-is. --gpt: the GPT rows alone.

dptrain's samples/s is the median of the samples_per_s of its train events
after the first one: the first interval holds the start-up (rank 0 filling its
input cache, first-touch of buffers), which the summary event includes and the
torch baseline's untimed warm-up excludes.
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

import cnn_rows
import gemm_rows
import gpt_rows
from bench_report import write_md, write_png

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA_WAIT = "data wait, fraction of step time (2 ranks)"
TARGETS = {"1 rank, 1 thread": ">= 2.0", "2 ranks DDP": ">= 5", "weak scaling": ">= 0.9",
           DATA_WAIT: "< 0.05", **cnn_rows.TARGETS, **gpt_rows.TARGETS}
# One thread per process everywhere, whatever the caller's environment says.
ENV_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# The PyTorch baseline runs as installed: no OPENBLAS_CORETYPE or other
# tuning (a user's own OPENBLAS_CORETYPE would reach both sides alike).
BASELINE_ENV = {}



def run(cmd, timeout, extra_env=None):
    env = dict(os.environ, **ENV_ONE_THREAD, **(extra_env or {}))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return p.stdout, time.perf_counter() - t0


def ratio_row(repeats, name, target, ours, base, ratio, ours_label, base_label, note,
              key="samples_per_s", unit="samples/s"):
    """A row of the end-to-end runs: the median `key` (samples/s) of run
    `ours`, base(median) for the baseline, and the median of ratio(repeat)
    over the repeats."""
    sps = lambda k: statistics.median(rep[k][key] for rep in repeats)
    ratios = [ratio(rep) for rep in repeats]
    return {"row": name, "ours": sps(ours), "baseline": base(sps), "unit": unit,
            "ratio": statistics.median(ratios), "ratios": ratios, "target": target,
            "ours_is": ours_label, "baseline_is": base_label, "note": note}


class Bench:
    def __init__(self, args):
        self.a = args
        self.dptrain = os.path.join(args.build_dir, "dptrain")

    def mpiexec(self, ranks):
        return [self.a.mpiexec, "-n", str(ranks), "--oversubscribe", *shlex.split(self.a.mpiexec_args)]

    def ours(self, ranks, batch=None, job=None, steps=None, log_every=None, data=None, extra=()):
        """dptrain train: the default job (the MLP) at `batch`, or the job file
        `job`, on --data or `data`, with `extra` options."""
        with tempfile.TemporaryDirectory() as tmp:
            metrics = os.path.join(tmp, "metrics.jsonl")
            cmd = self.mpiexec(ranks) + [self.dptrain, "train"] + (["--config", job] if job else []) + [
                "--data", data or self.a.data, "--device", "cpu", "--threads", "1",
                *(["--batch-size", str(batch)] if batch else []),
                "--steps", str(steps or self.a.dptrain_steps),
                "--log-every", str(log_every or self.a.log_every), "--val-set", "", "--metrics", metrics,
                *extra]
            out, wall = run(cmd, self.a.timeout)
            events = [json.loads(line) for line in open(metrics)]
        params = re.search(r"\((\d+) parameters\)", out)  # the start-up summary's model line
        train = [e["samples_per_s"] for e in events if e["event"] == "train"]
        tokens = [e["tokens_per_s"] for e in events if e["event"] == "train" and "tokens_per_s" in e]
        train_ms = [e["ms"] for e in events if e["event"] == "train" and "ms" in e]
        summary = [e for e in events if e["event"] == "summary"]
        if len(train) < 2:
            raise RuntimeError("dptrain wrote fewer than 2 train events: raise --dptrain-steps")
        return {"cmd": shlex.join(cmd), "wall_s": wall, "samples_per_s": statistics.median(train[1:]),
                "params": int(params.group(1)) if params else None,
                **({"tokens_per_s": statistics.median(tokens[1:]), "train_events_tps": tokens}
                   if len(tokens) >= 2 else {}),
                "train_events_sps": train, "train_events_ms": train_ms,
                "summary": summary[-1] if summary else None}

    def torch(self, mode, ranks, script="torch_mlp.py", extra=None, warmup=None, steps=None, data=None):
        """A PyTorch baseline: the MLP at --batch, or `script` with its own `extra` arguments."""
        extra = ["--batch", str(self.a.batch)] if extra is None else extra
        cmd = [self.a.python, os.path.join(HERE, script), "--data", data or self.a.data, *extra,
               "--mode", mode, "--ranks", str(ranks), "--threads", "1",
               "--warmup", str(warmup or self.a.torch_warmup), "--steps", str(steps or self.a.torch_steps)]
        out, wall = run(cmd, self.a.timeout, BASELINE_ENV)
        result = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        return {"cmd": shlex.join(cmd), "wall_s": wall, **result}

    def end_to_end(self):
        """Per repeat: every run once, ours and baseline alternating, and the
        order reversed every other repeat so a drift in machine load falls on
        both sides."""
        b = self.a.batch
        pairs = [] if self.a.skip_mlp else [
            ("dp_1r", lambda: self.ours(1, b)), ("torch_eager", lambda: self.torch("eager", 1)),
            ("dp_2r", lambda: self.ours(2, b)), ("torch_ddp", lambda: self.torch("ddp", 2)),
            ("dp_2r_weak", lambda: self.ours(2, 2 * b))]
        pairs += [] if self.a.skip_cnn else cnn_rows.runs(self)
        pairs += [] if self.a.skip_gpt else gpt_rows.runs(self)
        repeats = []
        for r in range(self.a.repeats):
            order = pairs if r % 2 == 0 else pairs[::-1]
            rep = {}
            for name, fn in order:
                rep[name] = fn()
                rate = (f"{rep[name]['tokens_per_s']:.0f} tokens/s" if "tokens_per_s" in rep[name]
                        else f"{rep[name]['samples_per_s']:.0f} samples/s")
                log(f"repeat {r + 1}/{self.a.repeats} {name}: {rate} ({rep[name]['wall_s']:.1f} s)")
            repeats.append(rep)

        row = lambda name, *rest: ratio_row(repeats, name, TARGETS[name], *rest)
        s = lambda rep, k: rep[k]["samples_per_s"]
        rows = [] if self.a.skip_mlp else [
            row("1 rank, 1 thread", "dp_1r", lambda sps: sps("torch_eager"),
                lambda rep: s(rep, "dp_1r") / s(rep, "torch_eager"),
                "dptrain 1 rank", "torch eager 1 thread", "ratio = ours / torch samples/s"),
            row("2 ranks DDP", "dp_2r", lambda sps: sps("torch_ddp"),
                lambda rep: s(rep, "dp_2r") / s(rep, "torch_ddp"),
                "dptrain mpiexec -n 2", "torch DDP gloo 2 procs", "ratio = ours / torch samples/s"),
            row("weak scaling", "dp_2r_weak", lambda sps: 2 * sps("dp_1r"),
                lambda rep: s(rep, "dp_2r_weak") / (2 * s(rep, "dp_1r")),
                f"dptrain 2 ranks batch {2 * b}", f"2 x dptrain 1 rank batch {b}",
                "efficiency = sps(2 ranks) / (2 sps(1 rank))"),
            self.data_wait(repeats),
        ]
        rows += [] if self.a.skip_cnn else cnn_rows.rows(repeats, ratio_row)
        rows += [] if self.a.skip_gpt else gpt_rows.rows(repeats, ratio_row)
        return rows, repeats

    @staticmethod
    def data_wait(repeats):
        """Rank 0's wait for input as a fraction of its step time, over the
        train events (after each run's first) of every 2-rank run."""
        runs = ("dp_2r", "dp_2r_weak")
        per_run = []
        for rep in repeats:
            for k in runs:
                per_run.append([e["data"] / sum(e.values()) for e in rep[k]["train_events_ms"][1:]
                                if sum(e.values()) > 0])
        pooled = [f for run in per_run for f in run]
        if not pooled:
            return {"row": DATA_WAIT, "status": "no data", "note": "no train events with \"ms\""}
        frac = statistics.median(pooled)
        return {"row": DATA_WAIT, "ours": frac, "baseline": "–", "unit": "of step time",
                "ratio": frac, "ratios": [statistics.median(r) for r in per_run if r],
                "target": TARGETS[DATA_WAIT],
                "note": f"median over {len(pooled)} train events (each run's first skipped) of the "
                        f"{len(per_run)} 2-rank runs ({', '.join(runs)}) of ms.data / sum of ms; "
                        "range = per-run medians"}

    def micro(self, tool="dptrain_bench", binary=None, specs=()):
        """The rows every RANKS:ARGS run of the micro-benchmark binary prints."""
        binary = binary or os.path.join(self.a.build_dir, "tools", "bench", tool)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            return [{"row": f"micro-benchmarks ({tool})", "status": "not built",
                     "note": f"{os.path.relpath(binary, ROOT)} not found"}], []
        rows, raw = [], []
        for spec in specs:
            ranks, _, sub = spec.partition(":")
            cmd = self.mpiexec(int(ranks)) + [binary, *shlex.split(sub or "all")]
            try:
                out, wall = run(cmd, self.a.micro_timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"micro-benchmark failed: {e}")
                rows.append({"row": f"{tool} ({spec})", "status": "failed", "note": str(e)[:200]})
                continue
            raw.append({"cmd": shlex.join(cmd), "wall_s": wall, "stdout": out})
            for line in out.splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and "row" in obj:
                    if len(specs) > 1:  # tell the runs' rows apart
                        obj["row"] = f"{obj['row']} [{ranks} rank{'s' if ranks != '1' else ''}]"
                    rows.append(obj)
        return rows, raw


def machine(args):
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  env=dict(os.environ, GIT_OPTIONAL_LOCKS="0")).stdout.strip()
        except OSError:
            return ""
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    commit = sh(["git", "rev-parse", "--short", "HEAD"])
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=ROOT,
                      env=dict(os.environ, GIT_OPTIONAL_LOCKS="0")).returncode:
        commit += " (+ uncommitted changes)"
    torch_v = sh([args.python, "-c", "import torch; print(torch.__version__)"])
    # The GEMM library and kernel dptrain runs here (its start-up summary), and
    # torch's BLAS: the figures depend on both.
    probe = (["--config", args.gpt_job, "--data", args.gpt_data, "--save", ""] if args.data is None
             else ["--data", args.data])
    startup = sh([os.path.join(args.build_dir, "dptrain"), "train", *probe, "--steps", "1",
                  "--val-set", "", "--device", "cpu", "--threads", "1"])
    gemm = re.search(r"^dptrain: GEMM (.*)$", startup, re.M)
    torch_blas = sh([args.python, "-c", "import torch, re; c = torch.__config__.show(); "
                     "m = re.search(r'BLAS_INFO=(\\w+)', c); print(m.group(1) if m else '?')"])
    return {"cpu": cpu, "cores": os.cpu_count(), "host": platform.node(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "dptrain_commit": commit, "torch": torch_v, "torch_blas": torch_blas,
            "dptrain_gemm": gemm.group(1) if gemm else "unknown (no GEMM line in the start-up summary)",
            "openmpi": (sh([args.mpiexec, "--version"]).splitlines() or [""])[0],
            "loadavg_start": open("/proc/loadavg").read().split()[:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="HDF5 data file with /train (the MLP and CNN rows; not needed with --gpt)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results"), help="output dir")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128, help="global batch (weak scaling doubles it)")
    ap.add_argument("--dptrain-steps", type=int, default=2000)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--torch-warmup", type=int, default=100)
    ap.add_argument("--torch-steps", type=int, default=1000)
    ap.add_argument("--python", default=sys.executable, help="python for torch_mlp.py")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mpiexec-args", default="", help="extra mpiexec arguments, e.g. '--bind-to none'")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--micro", help="dptrain_bench binary (default BUILD_DIR/tools/bench/dptrain_bench)")
    ap.add_argument("--micro-run", action="append", metavar="RANKS:ARGS",
                    help="one run of the micro binary (repeatable; default 2:all --data DATA)")
    ap.add_argument("--micro-timeout", type=float, default=600)
    ap.add_argument("--skip-e2e", action="store_true", help="only the micro-benchmark rows")
    ap.add_argument("--skip-mlp", action="store_true",
                    help="no MLP rows (end-to-end, dptrain_bench, GEMM): the CNN rows alone")
    ap.add_argument("--skip-cnn", action="store_true", help="no CNN rows")
    ap.add_argument("--skip-gpt", action="store_true", help="no GPT rows")
    ap.add_argument("--gpt", action="store_true", help="the GPT rows alone (--skip-mlp --skip-cnn)")
    ap.add_argument("--gpt-job", default=os.path.join(ROOT, "jobs", "text_gpt.ini"),
                    help="the GPT rows' job file (network, batch, optimizer)")
    ap.add_argument("--gpt-data", default=os.path.join(ROOT, "data", "fortunes.h5"),
                    help="the GPT rows' token set (tools/convert_text.py output)")
    ap.add_argument("--gpt-steps", type=int, default=30, help="dptrain steps per GPT run")
    ap.add_argument("--gpt-log-every", type=int, default=5)
    ap.add_argument("--gpt-torch-warmup", type=int, default=5)
    ap.add_argument("--gpt-torch-steps", type=int, default=20)
    ap.add_argument("--gpt-micro-run", metavar="RANKS:ARGS",
                    help="the dptrain_gpt_bench run (default 1:all with the job's model, batch, optimizer)")
    ap.add_argument("--cnn-job", default=os.path.join(ROOT, "jobs", "fashion_mnist_cnn.ini"),
                    help="the CNN rows' job file (network, batch, optimizer)")
    ap.add_argument("--cnn-steps", type=int, default=120, help="dptrain steps per CNN run")
    ap.add_argument("--cnn-log-every", type=int, default=20)
    ap.add_argument("--cnn-torch-warmup", type=int, default=10)
    ap.add_argument("--cnn-torch-steps", type=int, default=60)
    ap.add_argument("--cnn-micro-run", metavar="RANKS:ARGS",
                    help="the dptrain_cnn_bench run (default 2:all with the job's model and batch)")
    ap.add_argument("--gemm-rate", help="dptrain_gemm_rate of this build "
                    "(default BUILD_DIR/tools/bench/dptrain_gemm_rate)")
    ap.add_argument("--openblas-gemm-rate", help="dptrain_gemm_rate of a -DDPTRAIN_CPU_GEMM=openblas "
                    "build: the GEMM rows' baseline, under each OpenBLAS kernel the CPU runs")
    args = ap.parse_args()
    if args.gpt:
        args.skip_mlp = args.skip_cnn = True
        args.skip_gpt = False
    if args.data is None and not (args.skip_mlp and args.skip_cnn):
        ap.error("--data is needed for the MLP and CNN rows (or --gpt for the GPT rows alone)")
    if args.data is not None:
        args.micro_run = args.micro_run or [f"2:all --data {shlex.quote(args.data)}"]
        args.data = os.path.abspath(args.data)
    args.cnn_job = os.path.abspath(args.cnn_job)
    args.gpt_job = os.path.abspath(args.gpt_job)
    args.gpt_data = os.path.abspath(args.gpt_data)
    if not args.skip_gpt:
        if not os.path.isfile(args.gpt_data):
            sys.exit(f"bench: {args.gpt_data} not found: tools/convert_text.py "
                     "/usr/share/games/fortunes --output data/fortunes.h5 --window 64 (run.sh does it)")
        args.gpt_micro_run = args.gpt_micro_run or gpt_rows.micro_spec(args)
    if not args.skip_cnn:
        args.cnn_micro_run = args.cnn_micro_run or cnn_rows.micro_spec(args)
    args.build_dir = os.path.abspath(args.build_dir)
    if not os.access(os.path.join(args.build_dir, "dptrain"), os.X_OK):
        sys.exit(f"bench: {args.build_dir}/dptrain not built")
    os.makedirs(args.out, exist_ok=True)

    info = machine(args)
    if not args.skip_cnn:
        info["cnn"] = cnn_rows.describe(args)
    if not args.skip_gpt:
        info["gpt"] = gpt_rows.describe(args)
    b = Bench(args)
    rows, repeats = ([], []) if args.skip_e2e else b.end_to_end()
    micro_raw = []
    if not args.skip_mlp:
        micro_rows, micro_raw = b.micro(binary=args.micro, specs=args.micro_run)
        rows += micro_rows
    if not args.skip_cnn:
        cnn_micro_rows, cnn_raw = b.micro("dptrain_cnn_bench", specs=[args.cnn_micro_run])
        rows += cnn_micro_rows
        micro_raw += cnn_raw
    if not args.skip_gpt:
        gpt_micro_rows, gpt_raw = b.micro("dptrain_gpt_bench", specs=[args.gpt_micro_run])
        rows += gpt_micro_rows
        micro_raw += gpt_raw
    if not args.skip_mlp:
        rate_rows, gemm_raw = gemm_rows.table(args, run, log)
        rows += rate_rows
        micro_raw += gemm_raw
    info["loadavg_end"] = open("/proc/loadavg").read().split()[:3]

    md, js, png = (os.path.join(args.out, f"results.{e}") for e in ("md", "json", "png"))
    write_md(md, info, args, rows)
    if not args.skip_gpt:
        with open(md, "a") as f:
            f.write(gpt_rows.extra_md(micro_raw))
    json.dump({"machine": info, "config": vars(args), "rows": rows, "repeats": repeats,
               "micro_runs": micro_raw}, open(js, "w"), indent=1)
    write_png(png, rows)
    print(open(md).read())
    print(f"bench: wrote {md}, {js}, {png}")


if __name__ == "__main__":
    main()
