#!/usr/bin/env bash
# Implements: a rehearsal of tools/gpu-check.sh where there is no GPU. It
# builds the bundle (tools/gpu-bundle.sh), then in a private mount namespace
# (unshare -m) hides the system's Open MPI, PMIx, munge, libevent, hwloc,
# HDF5 (and the curl/ldap/sasl chain it links), BLAS, oneDNN, OpenMP and
# Boost libraries, their plugin folders, and the orterun/mpirun/mpiexec/
# orted/ssh/rsh commands, and runs the check from the bundle alone, with
# the one command line of docs/gpu.md (unpack the tarball, run the check it
# carries, results under $OUT). Inside, the namespace also stands in for
# what a sandboxed GPU machine does: no sysfs CPU topology (hwloc then
# complains at exit 0), a python3 first on the PATH that cannot import
# torch while a virtual environment (/opt/torch/.venv, as GPU images lay
# it out) holds a stand-in torch and the CUDA libraries as pip wheels do
# (nvidia/*/lib), and a stale cuBLAS in /usr/local/cuda/lib64, which the
# loader would find first. Without a GPU the check must get through its
# set-up (glibc, the venv's PyTorch found, the built cuBLAS version chosen
# over the stale one, ldd -r of every binary and library, every cuDNN
# sub-library opened, the smoke launch), report every GPU test skipped
# (gpu_tests exits 77), train the CPU references (the MLP; the GPT job on
# the bundled token set) from the bundle, and leave
# its table and logs in the output folder; it then exits 77. Last, 2 ranks
# are launched from the bundle (CPU training, gpu_tests), as the 2-GPU rows
# do. Then the rehearsal exits 0.
#   tools/gpu-check-rehearsal.sh          (root; NO_BUNDLE=1: use the bundle as it is)
# Environment: those of tools/gpu-bundle.sh (BUILD_DIR, NO_BUILD,
# BUNDLE_OUT), BUNDLE (the tarball; default in BUNDLE_OUT).
# Exit 77 (skipped) where no mount namespace can be made.
set -euo pipefail
cd "$(dirname "$0")/.."

note() { echo "gpu-check-rehearsal (${SECONDS} s): $*"; }
if [[ ${1:-} != --inside ]]; then
  if ! unshare -m true 2>/dev/null; then
    note "cannot make a mount namespace (needs root): skipped"
    exit 77
  fi
  [[ ${NO_BUNDLE:-0} == 1 ]] || tools/gpu-bundle.sh
  export BUNDLE=${BUNDLE:-${BUNDLE_OUT:-.gpu-bundle}/dptrain-gpu.tar.gz}
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
# The stale cuBLAS of the stand-ins below, compiled before the compiler's
# libraries are hidden: its version function only, with the real library's
# version node, so that plain ldd finds nothing wrong.
cuda=$(readlink -f /usr/local/cuda/lib64 2>/dev/null || true)
stale='' map=()
if [[ -e $cuda/libcublas.so.13 ]]; then
  stale=$scratch/stale
  mkdir -p "$stale"
  printf 'int cublasGetProperty(int t, int *v) { *v = t == 0 ? 13 : 0; return 0; }\n' >"$stale/cublas.c"
  node=$(objdump -T "$cuda/libcublas.so.13" | awk '$NF == "cublasCreate_v2" && !n++ {print $(NF - 1)}')
  [[ -n $node && $node != Base ]] && printf '%s { global: *; };\n' "$node" >"$stale/map" &&
    map=("-Wl,--version-script=$stale/map")
  cc -shared -fPIC -o "$stale/libcublas.so.13" "$stale/cublas.c" -Wl,-soname,libcublas.so.13 "${map[@]}"
  # Its cuBLASLt likewise (dptrain links it for the GEMM epilogues): one
  # function, the real library's version node.
  printf 'int cublasLtCreate(void **h) { *h = 0; return 0; }\n' >"$stale/cublasLt.c"
  node=$(objdump -T "$cuda/libcublasLt.so.13" | awk '$NF == "cublasLtCreate" && !n++ {print $(NF - 1)}')
  lt_map=()
  [[ -n $node && $node != Base ]] && printf '%s { global: *; };\n' "$node" >"$stale/lt-map" &&
    lt_map=("-Wl,--version-script=$stale/lt-map")
  cc -shared -fPIC -o "$stale/libcublasLt.so.13" "$stale/cublasLt.c" -Wl,-soname,libcublasLt.so.13 "${lt_map[@]}"
fi
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
  local dir=$1 re=$2 key real farm f name hidden=0 shown=()
  key=$(tr / _ <<<"$dir")
  real=$scratch/real$key farm=$scratch/view$key
  mkdir -p "$real" "$farm"
  mount --bind "$dir" "$real"
  for f in "$real"/* "$real"/.[!.]*; do
    [[ -e $f || -L $f ]] || continue
    name=${f##*/}
    if [[ $name =~ $re ]]; then hidden=$((hidden + 1)); continue; fi
    shown+=("$f")
  done
  # One ln for them all: a process per entry took half a minute.
  ((${#shown[@]} == 0)) || printf '%s\0' "${shown[@]}" | xargs -0 ln -s -t "$farm"
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

# --- what a sandboxed GPU machine does ---------------------------------------------------
# No sysfs CPU topology (older gVisor).
mount -t tmpfs tmpfs /sys/devices/system/cpu
# The CUDA libraries: the wheels of a venv hold the versions the bundle was
# built against (here: this machine's), /usr/local/cuda/lib64 a stale
# cuBLAS (an older minor release: its functions, not ours) ahead of them.
if [[ -n $stale ]]; then
  view "$cuda" '^libcublas(Lt)?\.so'
  real=$scratch/real$(tr / _ <<<"$cuda")
  cp "$stale/libcublas.so.13" "$cuda/libcublas.so.13"
  cp "$stale/libcublasLt.so.13" "$cuda/libcublasLt.so.13"
fi
# A python3 first on the PATH that cannot import torch; the venv that can.
mkdir -p "$scratch/bin" "$scratch/notorch/torch"
echo 'raise ImportError("stand-in: this python3 has no torch")' >"$scratch/notorch/torch/__init__.py"
printf '#!/bin/sh\nPYTHONPATH=%s exec /usr/bin/python3 "$@"\n' "$scratch/notorch" >"$scratch/bin/python3"
chmod +x "$scratch/bin/python3"
export PATH=$scratch/bin:$PATH
mount -t tmpfs tmpfs /opt
venv=/opt/torch/.venv
/usr/bin/python3 -m venv --without-pip "$venv"
site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$site/torch" "$site/nvidia/cu13/lib" "$site/nvidia/cudnn/lib" "$site/nvidia/nccl/lib"
cat >"$site/torch/__init__.py" <<'PY'
# Stands in for PyTorch: importable only outside the bundle's library path.
import os
if "/root/usr/lib/x86_64-linux-gnu" in os.environ.get("LD_LIBRARY_PATH", ""):
    raise ImportError("stand-in: the bundle's libraries are ahead of the image's")
__version__ = "0.0+rehearsal"
class cuda:
    @staticmethod
    def is_available():
        return False
PY
if [[ -n $stale ]]; then
  for f in "$real"/libcublas*.so.13 "$real"/libcudart.so.13; do ln -s "$f" "$site/nvidia/cu13/lib/"; done
  for f in "$real"/libcudnn*.so.9; do ln -s "$f" "$site/nvidia/cudnn/lib/"; done
  ln -s "$real/libnccl.so.2" "$site/nvidia/nccl/lib/"
fi

outdir=$scratch/out
mkdir -p "$outdir"
line=$(awk '/^<!-- the one command line -->$/ {getline; getline; print; exit}' docs/gpu.md)
[[ -n $line ]] || { note "no command line in docs/gpu.md"; exit 1; }
note "the one command line of docs/gpu.md (${#line} characters), OUT=$outdir"
set +e
OUT=$outdir bash -c "$line"
set -e
out=$outdir/gpu-check/console.txt
rc=$(sed -n 's/^gpu-check exit \([0-9]*\)$/\1/p' "$out" | tail -1)
built=$(sed -n 's/^cublas=//p' "$outdir/gpu-check/logs/machine.txt" | head -1)
need=("| setup | glibc | ok" "| setup | ldd (-r: every symbol of the programs; all libraries, plugins) | ok"
  "| setup | smoke launch (orterun -n 1 true) | ok | Open MPI" "skipped (no GPU visible)"
  "| setup | PyTorch | torch 0.0+rehearsal | $venv/bin/python |"
  "| setup | cuDNN sub-libraries (dlopen) | ok |"
  "| accuracy | CPU reference (fp32, 20 steps) | ok" "| gpt | CPU reference (fp32, 30 steps) | ok")
[[ -n $stale ]] && need+=("cublas $built (built with $built) from $site/nvidia/cu13/lib")
missing=0
for n in "${need[@]}"; do
  grep -qF -- "$n" "$out" || { note "missing from the table: $n"; missing=1; }
  grep -qF -- "$n" "$outdir/gpu-check/table.md" || { note "missing from table.md: $n"; missing=1; }
done
# What the smoke launch printed at exit 0 (it is judged by its exit code).
sed 's/^/  smoke launch: /' "$outdir/gpu-check/logs/smoke.txt" | head -10
grep -q "^_finished: exit 77 " "$outdir/gpu-check/table.md" || { note "table.md does not say how the check ended"; missing=1; }
for f in rows.tsv logs/env-start.txt logs/env-check.txt logs/machine.txt logs/ldd.txt logs/smoke.txt \
  logs/test-list.txt logs/test-list.err logs/tests1.txt logs/cpu-ref.jsonl logs/python.txt logs/cuda-libs.txt; do
  if [[ ! -e $outdir/gpu-check/$f ]]; then note "not in the output folder: $f"; missing=1; fi
done
# The 2-GPU rows launch 2 ranks, which no GPU-less check reaches: launch 2
# ranks from the bundle here (CPU training, and gpu_tests, which must skip).
row() { :; }
py=
tmp=$scratch/two-tmp work=$scratch/two-logs
mkdir -p "$tmp" "$work"
# shellcheck source=tools/gpu-check-env.sh
. tools/gpu-check-env.sh
unpack_bundle "$BUNDLE" "$scratch/two" && setup_env
set +e
timeout -k 5 120 orterun --oversubscribe --bind-to none -n 2 "$dptrain" train --data "$B/data/synthetic.h5" \
  --val-set "" --model dense:64,relu,dense:10 --loss xent --batch-size 128 --steps 5 --device cpu \
  --log-every 5 >"$scratch/two.txt" 2>&1
two_train=$?
timeout -k 5 60 orterun --oversubscribe --bind-to none -n 2 "$gpu_tests" >>"$scratch/two.txt" 2>&1
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
