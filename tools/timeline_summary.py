#!/usr/bin/env python3
"""Summarises a dptrain --timeline trace: per rank, the median and mean
duration of every phase over the steps from --skip on, and the share of the
main thread's step time each phase takes. Shows at a glance which rank
straggles and which phase it loses time in.

    tools/timeline_summary.py TRACE.json [--skip 100]
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

MAIN_PHASES = ["wait for data", "forward", "backward", "all-reduce wait", "optimizer"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=100, help="leave out steps before this (warm-up)")
    a = ap.parse_args()
    try:
        trace = json.load(open(a.trace))
    except (OSError, ValueError) as e:
        sys.exit(f"timeline_summary: cannot read {a.trace}: {e}")
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    durations = defaultdict(lambda: defaultdict(list))  # rank -> phase -> [us]
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("args", {}).get("step", -1) >= a.skip:
            durations[e["pid"]][e["name"]].append(e["dur"])
    if not durations:
        sys.exit(f"timeline_summary: no events from step {a.skip} on in {a.trace}")
    for rank in sorted(durations):
        phases = durations[rank]
        step_us = sum(statistics.mean(phases[p]) for p in MAIN_PHASES if phases[p])
        print(f"{names.get(rank, f'rank {rank}')}: {step_us:.0f} us per step (mean of the main-thread phases)")
        print(f"  {'phase':<24} {'median us':>10} {'mean us':>10} {'share':>7} {'count':>7}")
        for p in sorted(phases, key=lambda p: (p not in MAIN_PHASES, MAIN_PHASES.index(p) if p in MAIN_PHASES else 0, p)):
            v = phases[p]
            share = f"{statistics.mean(v) / step_us:7.1%}" if p in MAIN_PHASES and step_us else ""
            print(f"  {p:<24} {statistics.median(v):10.1f} {statistics.mean(v):10.1f} {share:>7} {len(v):7d}")


if __name__ == "__main__":
    main()
