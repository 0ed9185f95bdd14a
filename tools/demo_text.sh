#!/usr/bin/env bash
# The text demo, sibling of tools/demo.sh: installs, builds, converts Debian's
# fortunes (package fortunes) to a byte-level token set, data/fortunes.h5,
# trains the small GPT of jobs/text_gpt.ini on 2 CPU ranks under mpirun,
# prints the final test loss (nats per byte) and a sample the model writes,
# and leaves the model at runs/text_gpt.h5.
#   tools/demo_text.sh [extra dptrain train options...]
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh --demo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build-demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA="${DPTRAIN_CUDA:-OFF}"
cmake --build "$build" -j "$(nproc)" --target dptrain

py=$(tools/find-python.sh)
if [[ ! -f data/fortunes.h5 ]]; then
  "$py" tools/convert_text.py /usr/share/games/fortunes --output data/fortunes.h5 --window 64
fi

mkdir -p runs
metrics=runs/text_gpt.jsonl
mpirun -np 2 --oversubscribe "$build/dptrain" train --config jobs/text_gpt.ini \
  --device cpu --metrics "$metrics" "$@"

"$py" - "$metrics" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
evals = [e for e in events if e["event"] == "eval"]
summary = [e for e in events if e["event"] == "summary"][-1]
train = [e for e in events if e["event"] == "train" and "tokens_per_s" in e]
rate = sorted(e["tokens_per_s"] for e in train)[len(train) // 2] if train else 0
print(f"final test loss: {evals[-1]['loss']:.4f} nats per byte "
      f"({evals[-1]['loss'] / 0.693147:.3f} bits; accuracy {evals[-1]['accuracy']:.3f}; "
      f"{summary['steps']} steps in {summary['wall_s'] / 60:.1f} min, {rate:.0f} tokens/s on "
      f"{summary['ranks']} ranks)")
PY
echo "--- a sample (dptrain generate, temperature 0.8, top-k 40):"
"$build/dptrain" generate --checkpoint runs/text_gpt.h5 --prompt "The meaning of life is" \
  --tokens 300 --temperature 0.8 --top-k 40 --seed 1
