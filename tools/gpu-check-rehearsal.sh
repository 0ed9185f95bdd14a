#!/usr/bin/env bash
# Implements: a rehearsal of tools/gpu-check.sh where there is no GPU. It
# builds the bundle (tools/gpu-bundle.sh), then in a private mount namespace
# (unshare -m) hides the system's Open MPI, PMIx, munge, libevent, hwloc,
# HDF5 (and the curl/ldap/sasl chain it links), BLAS, oneDNN, OpenMP and
# Boost libraries, their plugin folders, and the orterun/mpirun/mpiexec/
# orted/ssh/rsh commands, and runs the check from the bundle alone. Without
# a GPU the check must get through its set-up (glibc, ldd of every binary,
# library and plugin, the smoke launch), report every GPU test skipped
# (gpu_tests exits 77), train the CPU reference from the bundle and print
# its table; it then exits 77. Last, 2 ranks are launched from the bundle
# (CPU training, gpu_tests), as the 2-GPU rows do. Then the rehearsal exits 0.
#   tools/gpu-check-rehearsal.sh          (root; NO_BUNDLE=1: use the bundle as it is)
# Exit 77 (skipped) where no mount namespace can be made.
set -euo pipefail
cd "$(dirname "$0")/.."

note() { echo "gpu-check-rehearsal: $*"; }
if [[ ${1:-} != --inside ]]; then
  if ! unshare -m true 2>/dev/null; then
    note "cannot make a mount namespace (needs root): skipped"
    exit 77
  fi
  [[ ${NO_BUNDLE:-0} == 1 ]] || tools/gpu-bundle.sh
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpu-rehearsal.XXXXXX")
  # The hiding below must never touch this namespace: the inner run checks
  # that its namespace is another one.
  set +e
  DPTRAIN_REHEARSAL_OUTER_NS=$(readlink /proc/self/ns/mnt) \
    unshare -m --propagation private "$0" --inside "$scratch"
  rc=$?
  rmdir "$scratch"  # empty here: everything inside lived on the namespace's tmpfs
  exit "$rc"
fi

scratch=${2:?}
if [[ -z ${DPTRAIN_REHEARSAL_OUTER_NS:-} || $(readlink /proc/self/ns/mnt) == "$DPTRAIN_REHEARSAL_OUTER_NS" ]]; then
  note "refusing to hide libraries outside a private mount namespace (run it without --inside)"
  exit 1
fi
# A tmpfs of this namespace: the views and mount points vanish with it, and
# nothing is ever removed through a bind of a real folder.
mount -t tmpfs tmpfs "$scratch"
libdir=/usr/lib/x86_64-linux-gnu
hide_libs='^(libmpi|libmpi_|libopen-(pal|rte)|liboshmem|libmca_common|libompitrace|libhdf5|libsz|libaec'
hide_libs+='|libopenblas|libblas|libcblas|liblapack|libdnnl|libOpenCL|libgomp|libboost|libpmix|libmunge'
hide_libs+='|libevent|libhwloc|libcurl|libnghttp2|librtmp|libssh2|libpsl|libldap|liblber|libsasl2'
hide_libs+='|libfabric|libucp|libucs|libuct|libucm|libibverbs|librdmacm|libpsm)'
hide_libs+='|^(openmpi|pmix2|hdf5|openblas-pthread|blas|lapack|libfabric|ucx|sasl2)$'
hide_cmds='^(orterun|orted|mpirun|mpiexec|mpirun\.openmpi|mpiexec\.openmpi|ompi_info|ompi-.*|orte-.*'
hide_cmds+='|ssh|rsh|scp|slogin|h5.*)$'

# view DIR REGEX: DIR shows every entry but those whose names match REGEX,
# as symlinks into the real DIR, bound at a scratch path first.
view() {
  local dir=$1 re=$2 key real farm f name hidden=0
  key=$(tr / _ <<<"$dir")
  real=$scratch/real$key farm=$scratch/view$key
  mkdir -p "$real" "$farm"
  mount --bind "$dir" "$real"
  for f in "$real"/* "$real"/.[!.]*; do
    [[ -e $f || -L $f ]] || continue
    name=${f##*/}
    if [[ $name =~ $re ]]; then hidden=$((hidden + 1)); continue; fi
    ln -s "$f" "$farm/$name"
  done
  mount --bind "$farm" "$dir"
  note "$dir: $hidden entries hidden"
}
view "$libdir" "$hide_libs"
view /usr/bin "$hide_cmds"
for d in /usr/share/openmpi /etc/openmpi; do
  [[ -d $d ]] && mkdir -p "$scratch/empty" && mount --bind "$scratch/empty" "$d"
done

# The hiding must hold, or the rehearsal proves nothing.
leaks=$(for c in orterun mpirun mpiexec ssh rsh; do command -v "$c" || true; done)
for l in libmpi.so.40 libhdf5_serial.so.103 libdnnl.so.2 libpmix.so.2 libmunge.so.2 libevent_core-2.1.so.7; do
  [[ -e $libdir/$l ]] && leaks+=" $libdir/$l"
done
ldconfig -p 2>/dev/null | grep -q "libmpi.so.40 .*=> /" && [[ -e $(ldconfig -p | awk '/libmpi.so.40 /{print $NF; exit}') ]] &&
  leaks+=" ld.so.cache:libmpi"
if [[ -n ${leaks// /} ]]; then note "still visible: $leaks"; exit 1; fi
note "system MPI/HDF5/BLAS/oneDNN/Boost/PMIx/munge/libevent/hwloc and orterun/mpirun/ssh are hidden"

out=$scratch/check.txt
set +e
tools/gpu-check.sh 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
need=("| setup | glibc | ok" "| setup | ldd (all binaries, libraries, plugins) | ok"
  "| setup | smoke launch (orterun -n 1 true) | ok" "skipped (no GPU visible)"
  "| accuracy | CPU reference (fp32, 20 steps) | ok")
missing=0
for n in "${need[@]}"; do
  grep -qF "$n" "$out" || { note "missing from the table: $n"; missing=1; }
done
# The 2-GPU rows launch 2 ranks, which no GPU-less check reaches: launch 2
# ranks from the bundle here (CPU training, and gpu_tests, which must skip).
row() { :; }
py=
# shellcheck source=tools/gpu-check-env.sh
. tools/gpu-check-env.sh
unpack_bundle "${BUNDLE:-.gpu-bundle/dptrain-gpu.tar.gz}" "$scratch/two" && setup_env
set +e
timeout -k 5 120 orterun --oversubscribe --bind-to none -n 2 "$dptrain" train --data "$B/data/synthetic.h5" \
  --val-set "" --model dense:64,relu,dense:10 --loss xent --batch-size 128 --steps 5 --device cpu \
  --log-every 5 >"$scratch/two.txt" 2>&1
two_train=$?
timeout -k 5 60 orterun --oversubscribe -n 2 "$gpu_tests" >>"$scratch/two.txt" 2>&1
two_tests=$?
set -e
note "2 ranks from the bundle: CPU training exit $two_train (want 0), gpu_tests exit $two_tests (want 77)"
if ((two_train != 0 || two_tests != 77)); then tail -20 "$scratch/two.txt"; missing=1; fi

if ((rc == 77 && missing == 0)); then
  note "passed: the check ran from the bundle alone, up to the GPU (gpu-check exit 77: no GPU)"
  exit 0
fi
((rc == 0 && missing == 0)) && { note "passed, with a GPU"; exit 0; }
note "FAILED (gpu-check exit $rc)"
exit 1
