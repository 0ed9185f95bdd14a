#!/usr/bin/env python3
"""The GPU check's kernel rows: an Nsight Compute CSV of the GPT step
(`ncu --csv --metrics gpu__time_duration.sum`, one row per kernel launch)
summed by kernel, heaviest first.

    gpu-check-kernels.py CSV [--top N] [--markdown FILE] [--label TEXT]

Prints the check's rows (section, check, result, detail; tab-separated,
each line starting with "speed"): one for the whole profile (launches,
kernel time) and one for each of the N heaviest kernels (result: its share
of all kernel time; detail: launches, total and mean duration). --markdown
writes the whole table, every kernel, to FILE. Reads both of ncu's CSV
layouts: the details page (a "Metric Name" / "Metric Unit" / "Metric
Value" row per launch and metric) and the raw page (a column per metric,
its unit in the row under the header). Exit 1, saying why, where the file
holds no duration.
"""
import argparse
import csv
import sys

METRIC = "gpu__time_duration.sum"
MS_PER_UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0,
               "ms": 1.0, "second": 1e3, "s": 1e3}


def short_name(name):
    """'void ns::(anonymous namespace)::k<float, 64>(const float *, int)' -> 'k<float, 64>'."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside <...>
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            cut = i
            break
    head = name[:cut].strip().replace("(anonymous namespace)::", "")
    depth, last = 0, 0  # drop the return type and namespaces, not what is inside <...>
    for i, ch in enumerate(head):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and ch == " ":
            last = i + 1
        elif depth == 0 and head.startswith("::", i):
            last = i + 2
    return head[last:] or name


def number(text):
    return float(text.replace(",", ""))


def durations(rows):
    """(kernel name, ms) for each launch, from either CSV layout."""
    at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if at is None:
        raise ValueError("no header with a 'Kernel Name' column")
    header, body = rows[at], rows[at + 1:]
    name = header.index("Kernel Name")
    if "Metric Name" in header:  # details page
        metric, unit, value = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
        for r in body:
            if len(r) > value and r[metric] == METRIC:
                yield r[name], number(r[value]) * MS_PER_UNIT[r[unit].strip()]
        return
    if METRIC not in header:
        raise ValueError("neither a 'Metric Name' nor a '%s' column" % METRIC)
    value, scale = header.index(METRIC), MS_PER_UNIT["nsecond"]
    if body and len(body[0]) > value and not body[0][name]:  # the units row
        scale = MS_PER_UNIT[body[0][value].strip()]
        body = body[1:]
    for r in body:
        if len(r) > value and r[value].strip():
            yield r[name], number(r[value]) * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--markdown")
    ap.add_argument("--label", default="GPT step by kernel")
    a = ap.parse_args()
    with open(a.csv, newline="", errors="replace") as f:
        rows = list(csv.reader(f))
    kernels = {}
    try:
        for name, ms in durations(rows):
            calls, total = kernels.get(short_name(name), (0, 0.0))
            kernels[short_name(name)] = (calls + 1, total + ms)
    except (ValueError, KeyError) as e:
        print("%s: %s is not an ncu CSV of kernel durations: %s" % (sys.argv[0], a.csv, e), file=sys.stderr)
        return 1
    if not kernels:
        print("%s: %s holds no %s" % (sys.argv[0], a.csv, METRIC), file=sys.stderr)
        return 1
    order = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    launches = sum(c for c, _ in kernels.values())
    all_ms = sum(t for _, t in kernels.values())
    print("speed\t%s (ncu)\tok\t%d launches of %d kernels, %.4g ms of kernel time in all; the %d "
          "heaviest below, every kernel in logs/gpt-kernels.md" %
          (a.label, launches, len(kernels), all_ms, min(a.top, len(order))))
    for name, (calls, total) in order[:a.top]:
        print("speed\t%s: %s (ncu)\t%.3f\t%d launches, %.4g ms in all, %.4g ms each on average" %
              (a.label, name.replace("|", "/"), total / all_ms, calls, total, total / calls))
    if a.markdown:
        with open(a.markdown, "w") as out:
            out.write("| kernel | launches | ms in all | share |\n|---|---|---|---|\n")
            for name, (calls, total) in order:
                out.write("| `%s` | %d | %.4f | %.4f |\n" % (name.replace("|", "/"), calls, total, total / all_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
