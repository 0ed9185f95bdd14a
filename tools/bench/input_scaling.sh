#!/usr/bin/env bash
# Implements: the input-path matrix behind docs/scaling.md: dptrain_input_bench
# (no compute) for samples of 784 B, 12 KiB and 1 MiB, on 2 and 4 ranks, for
# each --input-readers choice, on one node and, where tools/simnodes.sh can
# make them, on 2 simulated nodes; every row against the raw read bandwidth of
# the same file. Writes OUT/input_scaling.jsonl and prints a Markdown table.
#   tools/bench/input_scaling.sh [OUT]      (default OUT: bench-results)
# Environment: BUILD_DIR (default build: a tree with dptrain_input_bench
# built), PYTHON (a python3 with h5py; tools/find-python.sh finds one),
# MB (size of each data file, default 128).
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-bench-results}
build=${BUILD_DIR:-build}
bench=$build/tools/bench/dptrain_input_bench
[[ -x $bench ]] || { echo "input_scaling: build $bench first (cmake --build $build --target dptrain_input_bench)" >&2; exit 1; }
py=$(tools/find-python.sh)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mb=${MB:-128}
mkdir -p "$out/data"
results=$out/input_scaling.jsonl
: >"$results"

# name shape batch: uint8 samples of 784 B, 12 KiB and 1 MiB; batches of
# about 0.8, 1.5 and 16 MiB.
cases=("s784 28,28 1024" "s12k 3,64,64 128" "s1m 1024,1024 16")
for c in "${cases[@]}"; do
  read -r name shape batch <<<"$c"
  file=$out/data/$name.h5
  bytes=$("$py" -c "import math; print(math.prod(int(x) for x in '$shape'.split(',')))")
  n=$(((mb << 20) / bytes))
  [[ -f $file ]] || "$py" tools/make_synthetic.py "$file" --n "$n" --val-n 8 --shape "$shape" \
    --classes 10 --dtype uint8 --seed 1 >/dev/null
  for np in 2 4; do
    for readers in rank0 node all; do
      mpirun -n "$np" "$bench" --data "$file" --readers "$readers" --batch "$batch" | sed 's/}$/,"where":"1 node"}/' >>"$results"
      if tools/simnodes.sh --check 2>/dev/null; then
        tools/simnodes.sh --private-net --nodes 2 --per-node $((np / 2)) -- "$bench" --data "$file" \
          --readers "$readers" --batch "$batch" | sed 's/}$/,"where":"2 simulated nodes"}/' >>"$results"
      fi
    done
  done
done

"$py" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| sample | ranks | where | readers | samples/s | MB/s | raw read MB/s | of raw |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    size = r["sample_bytes"]
    label = f"{size} B" if size < 1024 else (f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB")
    print(f"| {label} | {r['ranks']} | {r['where']} | {r['readers']} ({r['input_readers']}) | "
          f"{r['samples_per_s']:,.0f} | {r['bytes_per_s'] / 1e6:,.0f} | {r['raw_read_bytes_per_s'] / 1e6:,.0f} | "
          f"{r['bytes_per_s'] / r['raw_read_bytes_per_s']:.2f} |")
PY
