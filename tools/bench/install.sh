#!/usr/bin/env bash
# Implements: the bench-only Debian packages (PyTorch baseline, plot) on top
# of what tools/install-deps.sh installs. Safe to run again; quiet when done.
#   tools/bench/install.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

# Build/test deps and the Fashion-MNIST package the bench trains on.
tools/install-deps.sh --demo >/dev/null

packages=(python3-torch python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
((${#missing[@]} == 0)) && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "bench/install: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
