#!/usr/bin/env python3
# Implements: the reports of tools/bench/bench.py: the verdict of a ratio
# against its target, results.md (the table) and results.png (the plot).
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def verdict(ratio, target):
    """'yes, by 12%' / 'no, short by 8%' for targets like '>= 1.5' or '<= 1.25'."""
    m = re.fullmatch(r"\s*(>=|<=|>|<)\s*([0-9.eE+-]+)\s*x?\s*", str(target or ""))
    if ratio is None or not m:
        return "–"
    op, t = m.group(1), float(m.group(2))
    ok = ratio >= t if op.startswith(">") else ratio <= t
    margin = abs(ratio - t) / t * 100
    return f"yes, by {margin:.0f}%" if ok else f"**no**, short by {margin:.0f}%"


def fmt(v, unit):
    if not isinstance(v, (int, float)):
        return str(v)
    return f"{v:,.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def write_md(path, info, args, rows):
    lines = [
        "# dptrain vs PyTorch (CPU)", "",
        f"- machine: {info['cpu']}, {info['cores']} cores ({info['host']})",
        f"- date: {info['date']}; load average at start: {' '.join(info['loadavg_start'])}",
        f"- dptrain commit {info['dptrain_commit']}; torch {info['torch']}; {info['openmpi']}",
        f"- GEMMs: dptrain {info['dptrain_gemm']}; torch BLAS {info['torch_blas']}",
        (f"- data: {os.path.relpath(args.data, ROOT)}; " if args.data else "- ")
        + ("" if getattr(args, "skip_mlp", False) else f"MLP 784-256-256-10, Adam, global batch {args.batch}; ")
        + f"{args.repeats} repeats, medians; 1 thread per process (OMP/OPENBLAS_NUM_THREADS=1)",
        *([f"- {info['cnn']}"] if info.get("cnn") else []),
        *([f"- {info['gpt']}"] if info.get("gpt") else []), "",
        "| row | ours | baseline | ratio (median) | target | met? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "status" in r:
            lines.append(f"| {r['row']} | {r['status']} | – | – | – | – |")
            continue
        ratio = r.get("ratio")
        spread = ""
        if r.get("ratios") and len(r["ratios"]) > 1:
            spread = f" ({min(r['ratios']):.2f}–{max(r['ratios']):.2f})"
        ours = fmt(r.get("ours"), r.get("unit", ""))
        base = fmt(r.get("baseline"), r.get("unit", ""))
        if "ours_is" in r:
            ours, base = f"{ours} ({r['ours_is']})", f"{base} ({r['baseline_is']})"
        rtxt = f"{ratio:.2f}{spread}" if isinstance(ratio, (int, float)) else "–"
        lines.append(f"| {r['row']} | {ours} | {base} | {rtxt} | {r.get('target', '–')} | "
                     f"{verdict(ratio, r.get('target'))} |")
    notes = [f"- {r['row']}: {r['note']}" for r in rows if r.get("note")]
    if notes:
        lines += ["", "In parentheses after a ratio: its range across the repeats.", "", *notes]
    open(path, "w").write("\n".join(lines) + "\n")


def write_png(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = [r for r in rows if isinstance(r.get("ratio"), (int, float))]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(shown) + 2), 4.5))
    for i, r in enumerate(shown):
        met = verdict(r["ratio"], r.get("target"))  # "–": no target (a share, a cost)
        color = "tab:gray" if met == "–" else "tab:green" if met.startswith("yes") else "tab:red"
        ax.bar(i, r["ratio"], color=color, width=0.6)
        if r.get("ratios"):
            ax.plot([i] * len(r["ratios"]), r["ratios"], "k.", ms=4)
        ax.annotate(f"{r['ratio']:.2f}", (i, r["ratio"]), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points")
        m = re.search(r"[0-9.]+", str(r.get("target", "")))
        if m:
            ax.hlines(float(m.group()), i - 0.4, i + 0.4, colors="k", linestyles="--")
            ax.annotate(str(r["target"]), (i + 0.4, float(m.group())), fontsize=8, va="bottom", ha="right")
    ax.set_xticks(range(len(shown)), [r["row"] for r in shown], rotation=15, ha="right")
    ax.set_ylabel("ratio (median; dots = repeats)")
    ax.set_title("dptrain vs PyTorch CPU: ratio against target (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
