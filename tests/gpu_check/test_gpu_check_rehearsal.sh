# Tests: the carried path of the GPU check, as CI can run it: the bundle of
# tools/gpu-bundle.sh packed from this ctest build tree's own binaries
# (DPTRAIN_BUILD_DIR; no second build), then tools/gpu-check-rehearsal.sh:
# in a private mount namespace, with the system's Open MPI, HDF5, BLAS,
# oneDNN and Boost hidden and stand-ins for a sandboxed GPU machine (no
# sysfs CPU topology, torch only in /opt/torch/.venv, a stale cuBLAS ahead
# of the built one), the one command line of docs/gpu.md unpacks the
# tarball and runs the check it carries, which must get through its set-up,
# skip every GPU row (no GPU), train the CPU reference and leave its table
# and logs in the output folder; then 2 ranks launch from the bundle.
# Skipped (77) where no mount namespace can be made (not root). The first
# run fetches the Debian packages of tools/gpu-deps.sh (network) into
# .gpu-deps/; later runs reuse them.
set -euo pipefail
: "${DPTRAIN_SOURCE_DIR:?run through ctest}" "${DPTRAIN_BUILD_DIR:?run through ctest}"
cd "$DPTRAIN_SOURCE_DIR"
if ! unshare -m true 2>/dev/null; then
  echo "cannot make a mount namespace (needs root): skipped"
  exit 77
fi
SECONDS=0
export BUILD_DIR=$DPTRAIN_BUILD_DIR NO_BUILD=1 BUNDLE_OUT=$DPTRAIN_BUILD_DIR/gpu-check-rehearsal
tools/gpu-bundle.sh
echo "bundle packed in $SECONDS s"
NO_BUNDLE=1 tools/gpu-check-rehearsal.sh
echo "PASS: the bundle and the rehearsal in $SECONDS s"
