#!/usr/bin/env bash
# Installs what is missing, configures, builds (with the CUDA backend whenever
# nvcc is present) and runs every test through ctest.
#   tools/test.sh [ctest arguments...]      e.g. tools/test.sh -R mpi
# Environment: BUILD_DIR (default build), JOBS (default: all cores),
# DPTRAIN_CUDA (AUTO), CMAKE_ARGS (more cmake options, e.g.
# -DDPTRAIN_CPU_GEMM=openblas).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

# Open MPI refuses to start as root without these (containers, CI).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck disable=SC2086  # CMAKE_ARGS is a list of options
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA="${DPTRAIN_CUDA:-AUTO}" ${CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure --timeout 900 "$@"
