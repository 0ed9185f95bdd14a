#!/usr/bin/env bash
# The main job on the built-in default: installs, builds, converts
# Fashion-MNIST (Debian package dataset-fashion-mnist) to data/fashion_mnist.h5
# and trains the MLP of jobs/fashion_mnist.ini on 2 CPU ranks under mpirun.
#   tools/demo.sh [extra dptrain train options...]
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh --demo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The demo trains on CPU ranks: skip compiling the CUDA backend unless asked.
build=${BUILD_DIR:-build-demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA="${DPTRAIN_CUDA:-OFF}"
cmake --build "$build" -j "$(nproc)" --target dptrain

py=$(tools/find-python.sh)
if [[ ! -f data/fashion_mnist.h5 ]]; then
  "$py" tools/convert_fashion_mnist.py data/fashion_mnist.h5
fi

mkdir -p runs
metrics=runs/fashion_mnist.jsonl
mpirun -np 2 --oversubscribe "$build/dptrain" train --config jobs/fashion_mnist.ini \
  --device cpu --metrics "$metrics" "$@"

"$py" - "$metrics" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
evals = [e for e in events if e["event"] == "eval"]
summary = [e for e in events if e["event"] == "summary"][-1]
print(f"final test accuracy: {evals[-1]['accuracy']:.4f} "
      f"(loss {evals[-1]['loss']:.4f}, {summary['steps']} steps, "
      f"{summary['samples_per_s']:.0f} samples/s on {summary['ranks']} ranks)")
PY
