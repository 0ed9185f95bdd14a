#!/usr/bin/env bash
# Installs the Debian packages dptrain needs to build, test and run. Safe to
# run again: only missing packages are installed.
#   tools/install-deps.sh            build + test dependencies
#   tools/install-deps.sh --demo     also the demos' data: Fashion-MNIST and
#                                    fortunes (text for tools/convert_text.py)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-dev
  libboost-program-options-dev
  libdnnl-dev            # oneDNN: the CPU backend (GEMMs, and the layers' primitives)
  libopenblas-dev        # GEMMs where oneDNN has no fast path (cmake -DDPTRAIN_CPU_GEMM=openblas)
  libgtest-dev
  libboost-context-dev   # the emulated_gpu test: CUDA kernels on host fibers
  nlohmann-json3-dev
  python3 python3-numpy python3-h5py
  clang libclang-rt-dev  # the fuzz_readers test (tools/fuzz.sh): libFuzzer
  slurm-wlm munge  # the slurm_jobs test starts its own private daemons with them
)
if [[ "${1:-}" == "--demo" ]]; then
  packages+=(dataset-fashion-mnist fortunes)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
