#!/usr/bin/env bash
# Fashion-MNIST on one machine with mpirun: N CPU ranks (default 2), the
# demo's job with checkpoints. Extra arguments go to dptrain train.
#   jobs/mpirun_local.sh [N] [options...]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2}
shift || true
mpirun -np "$n" --oversubscribe build/dptrain train --config jobs/fashion_mnist.ini \
  --device cpu --checkpoint-dir runs/fmnist-ckpt --checkpoint-every 1000 "$@"
