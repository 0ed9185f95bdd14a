#!/usr/bin/env bash
# Prints a python3 that can import h5py and numpy (the Debian packages
# python3-h5py and python3-numpy install them for the system python3, which a
# user's own python3 earlier on PATH may hide).
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  [[ -n "$py" ]] || continue
  if "$py" -c "import h5py, numpy" >/dev/null 2>&1; then
    command -v "$py"
    exit 0
  fi
done
echo "find-python: no python3 with h5py and numpy; run tools/install-deps.sh" >&2
exit 1
