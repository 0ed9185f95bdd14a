#!/usr/bin/env python3
# Implements: the GPT rows of tools/bench/bench.py, on the job of --gpt-job
# (jobs/text_gpt.ini: its model, batch and optimizer, a fixed number of
# steps) and the token set of --gpt-data (data/fortunes.h5): dptrain against
# PyTorch eager (1 rank) and DDP gloo (2 ranks) through
# tools/bench/torch_gpt.py, in tokens/s; the demo job's tokens/s on 2 ranks
# against twice its 1-rank rate, with where its step's time goes by phase;
# and the rows of dptrain_gpt_bench (the step against its GEMMs replayed
# bare, the step's time per layer family).
import configparser
import os
import shlex
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
ONE_RANK = "GPT 1 rank, 1 thread"
DDP = "GPT 2 ranks DDP"
DEMO = "GPT demo job, 2 ranks (tokens/s and scaling)"
TARGETS = {ONE_RANK: ">= 1.5", DDP: ">= 2", DEMO: ""}
PHASES = ("data", "forward", "backward", "comm", "optimizer")


def read_job(path):
    """The job file's keys (INI without a section, as dptrain --config reads it)."""
    job = configparser.ConfigParser(inline_comment_prefixes=("#",))
    with open(path) as f:
        job.read_string("[job]\n" + f.read())
    return dict(job["job"])


def token_set(data, set_name="train"):
    """(T, vocab_size) of a token set: /<set>/tokens is [N, T+1]."""
    import h5py
    with h5py.File(data, "r") as f:
        d = f[f"{set_name}/tokens"]
        vocab = d.attrs.get("vocab_size", f[set_name].attrs.get("vocab_size", f.attrs.get("vocab_size", 256)))
        return d.shape[1] - 1, int(vocab)


def describe(args):
    """One line for the results header."""
    job = read_job(args.gpt_job)
    tokens, vocab = token_set(args.gpt_data)
    root = os.path.dirname(os.path.dirname(HERE))
    return (f"GPT: {os.path.relpath(args.gpt_job, root)} (`{job.get('model')}`, batch "
            f"{job.get('batch-size')} x {tokens} tokens, vocab {vocab}, {job.get('optimizer')} lr "
            f"{job.get('lr')}, weight decay {job.get('weight-decay', 0)} on "
            f"{job.get('weight-decay-params', 'all')}, clip-grad-norm {job.get('clip-grad-norm', 0)}) "
            f"on {os.path.relpath(args.gpt_data, root)}; dptrain {args.gpt_steps} steps (tokens/s of "
            f"its train events every {args.gpt_log_every} after the first), torch "
            f"{args.gpt_torch_warmup} warm-up + {args.gpt_torch_steps} timed steps")


def runs(bench):
    """(name, run) of one repeat of the end-to-end GPT runs."""
    a = bench.a
    # No checkpoint (the job saves one), no validation pass.
    dp = dict(job=a.gpt_job, steps=a.gpt_steps, log_every=a.gpt_log_every, data=a.gpt_data,
              extra=["--save", ""])
    torch = dict(script="torch_gpt.py", extra=["--config", a.gpt_job], data=a.gpt_data,
                 warmup=a.gpt_torch_warmup, steps=a.gpt_torch_steps)
    return [("gpt_dp_1r", lambda: bench.ours(1, **dp)),
            ("gpt_torch_eager", lambda: bench.torch("eager", 1, **torch)),
            ("gpt_dp_2r", lambda: bench.ours(2, **dp)),
            ("gpt_torch_ddp", lambda: bench.torch("ddp", 2, **torch))]


def same_network(repeats):
    runs = (("gpt_dp_1r", "gpt_torch_eager"), ("gpt_dp_2r", "gpt_torch_ddp"))
    counts = {(rep[dp].get("params"), rep[t].get("params")) for rep in repeats for dp, t in runs}
    ours, theirs = next(iter(counts))
    if len(counts) == 1 and ours is not None and ours == theirs:
        return f"{ours:,} parameters on both sides"
    return f"PARAMETER COUNTS DIFFER (dptrain, torch): {sorted(counts, key=str)}"


def phases(repeats, run):
    """'data 0.1, forward 20.3, ...' ms per step: medians over the train
    events (each run's first skipped) of every repeat of run."""
    events = [e for rep in repeats for e in rep[run]["train_events_ms"][1:]]
    if not events:
        return "no phase times"
    return ", ".join(f"{p} {statistics.median(e.get(p, 0.0) for e in events):.2f}" for p in PHASES)


def rows(repeats, ratio_row):
    t = lambda rep, k: rep[k]["tokens_per_s"]
    same = same_network(repeats)
    tok = dict(key="tokens_per_s", unit="tokens/s")
    return [
        ratio_row(repeats, ONE_RANK, TARGETS[ONE_RANK], "gpt_dp_1r", lambda m: m("gpt_torch_eager"),
                  lambda rep: t(rep, "gpt_dp_1r") / t(rep, "gpt_torch_eager"),
                  "dptrain 1 rank", "torch eager 1 thread",
                  f"the GPT job, {same}; ratio = ours / torch tokens/s", **tok),
        ratio_row(repeats, DDP, TARGETS[DDP], "gpt_dp_2r", lambda m: m("gpt_torch_ddp"),
                  lambda rep: t(rep, "gpt_dp_2r") / t(rep, "gpt_torch_ddp"),
                  "dptrain mpiexec -n 2", "torch DDP gloo 2 procs",
                  f"the GPT job, global batch as the job's (half on each rank), {same}; "
                  "ratio = ours / torch tokens/s", **tok),
        ratio_row(repeats, DEMO, TARGETS[DEMO], "gpt_dp_2r", lambda m: 2 * m("gpt_dp_1r"),
                  lambda rep: t(rep, "gpt_dp_2r") / (2 * t(rep, "gpt_dp_1r")),
                  "dptrain mpiexec -n 2", "2 x dptrain 1 rank",
                  "the demo job (jobs/text_gpt.ini) as the text demo runs it, on 2 ranks; ratio = "
                  "tokens/s on 2 ranks / twice the 1-rank rate (scaling efficiency); ms per step "
                  f"on 2 ranks (rank 0, medians): {phases(repeats, 'gpt_dp_2r')}; on 1 rank: "
                  f"{phases(repeats, 'gpt_dp_1r')}", **tok),
    ]


def micro_spec(args):
    """The RANKS:ARGS of the dptrain_gpt_bench run (bench.py --micro-run form)."""
    job = read_job(args.gpt_job)
    tokens, vocab = token_set(args.gpt_data)
    opts = [("--lr", "lr"), ("--beta2", "beta2"), ("--weight-decay", "weight-decay"),
            ("--clip-grad-norm", "clip-grad-norm"), ("--weight-decay-params", "weight-decay-params")]
    extra = " ".join(f"{flag} {shlex.quote(job[key])}" for flag, key in opts if key in job)
    return (f"1:all --model {shlex.quote(job['model'])} --batch {job.get('batch-size', 32)} "
            f"--tokens {tokens} --vocab {vocab} {extra}")


def extra_md(micro_raw):
    """Markdown of the dptrain_gpt_bench run's breakdown: the step's time per
    layer family and the bare time of each distinct GEMM of the step."""
    import json
    families, calls = None, None
    for run in micro_raw:
        if "dptrain_gpt_bench" not in run.get("cmd", ""):
            continue
        for line in run["stdout"].splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "gpt_families" in obj:
                families = obj
            if isinstance(obj, dict) and "gpt_gemm_calls" in obj:
                calls = obj["gpt_gemm_calls"]
    lines = []
    if families:
        lines += ["", "## GPT step by layer family (dptrain_gpt_bench layers, 1 rank)", "",
                  f"The step driven through the Layer API: {families['step_ms']:.1f} ms (train_step of "
                  f"the same model {families['train_step_ms']:.1f} ms); medians of "
                  f"{families['repeats']} steps.", "",
                  "| family | ms per step | share | forward | backward | GEMMs (calls) | "
                  "batched GEMMs (calls) | the rest |",
                  "|---|---|---|---|---|---|---|---|"]
        for f in families["gpt_families"]:
            rest = f["ms"] - f["gemm_ms"] - f["batched_ms"]
            gemm = f"{f['gemm_ms']:.2f} ({f['gemm_calls']})" if f["gemm_calls"] else "–"
            batched = f"{f['batched_ms']:.2f} ({f['batched_calls']})" if f["batched_calls"] else "–"
            fwd = f["forward_ms"] + (f["update_ms"] if f["family"] == "optimizer" else 0.0)
            if f.get("folded_calls") and f["ms"] <= 0:
                rest = f"folded into dense's GEMMs ({f['folded_calls']} calls)"
            else:
                rest = f"{rest:.2f}"
            lines.append(f"| {f['family']} | {f['ms']:.2f} | {100 * f['share']:.1f}% | {fwd:.2f} | "
                         f"{f['backward_ms']:.2f} | {gemm} | {batched} | {rest} |")
    if calls:
        lines += ["", "## The GPT step's GEMMs, each alone (bare, through the Backend)", "",
                  "| m×n×k, op | calls per step | ms per call | GFLOP/s |", "|---|---|---|---|"]
        for c in calls:
            lines.append(f"| {c['shape']} | {c['count']} | {c['ms']:.3f} | {c['gflops']:.0f} |")
    return "\n".join(lines) + "\n" if lines else ""
