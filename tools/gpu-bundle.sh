#!/usr/bin/env bash
# Implements: the one carried path of the GPU check. Builds the GPU binaries
# (dptrain, gpu_tests, dptrain_bench, dptrain_gpt_bench, dptrain_nccl_rate,
# dptrain_conv_layout), gathers their runtime (tools/gpu-deps.sh: Open MPI,
# PMIx, HDF5, Boost, oneDNN, ...), strips the binaries, adds the CUDA
# runtime (libcudart, 0.7 MB), a synthetic data set and the GPT rows' token
# set (this checkout's README.md and docs/ as bytes, T = 64, made with
# tools/convert_text.py), and packs it all into one gzip tarball (gzip unpacks
# on any Linux), checked here to fit the 64 MiB that a GPU machine takes:
#   tools/gpu-bundle.sh          -> .gpu-bundle/dptrain-gpu.tar.gz (+ MANIFEST)
# Carry .gpu-bundle/ with the working tree; on the GPU machine run
# tools/gpu-check.sh, which unpacks it; or carry the tarball alone, which
# holds the check's scripts: tar -xzf it and run tools/gpu-check.sh inside
# (docs/gpu.md, "Checking a GPU machine", has the whole command line).
#
# Before packing, every NEEDED entry of every binary, library and plugin is
# resolved by name: inside the bundle, or among what the GPU machine brings
# (glibc, the driver's libcuda, and cuBLAS/NCCL/cuDNN from a CUDA 13 toolkit
# or PyTorch's nvidia-* wheels). Open MPI plugins that need a left-out
# network transport are dropped, so every plugin left must load. MANIFEST
# names the newest glibc symbol version anything in the bundle needs, and
# the cuBLAS, cuDNN and NCCL versions the binaries were built against (read
# by dptrain_libprobe, a small C program that goes in the bundle: the check
# prefers those versions among the GPU machine's, and opens each cuDNN
# sub-library with it).
#   tools/gpu-bundle.sh --probe FILE   builds dptrain_libprobe alone (tests)
# Environment: BUILD_DIR (default build-gpu; a ctest build tree serves),
# JOBS (build jobs), NO_BUILD=1 (pack what is built), DEPS_REFRESH=1 (run
# tools/gpu-deps.sh again), BUNDLE_OUT (default .gpu-bundle).
set -euo pipefail
cd "$(dirname "$0")/.."

# dptrain_libprobe version cublas|cudnn|nccl LIB: the library's version
# (cublasGetProperty, cudnnGetVersion, ncclGetVersion: no GPU needed).
# dptrain_libprobe open LIB...: dlopen each, "ok" or "FAILED" and why; exit
# 1 when any failed. Needs only glibc 2.34.
build_probe() {
  local src
  src=$(mktemp --suffix=.c)
  cat >"$src" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
static int version(const char *family, const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  if (!strcmp(family, "cublas")) {
    int (*get)(int, int *) = (int (*)(int, int *))dlsym(lib, "cublasGetProperty");
    int v[3] = {0, 0, 0}; /* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL */
    for (int i = 0; i < 3; i++) if (!get || get(i, &v[i]) != 0) return 1;
    printf("%d.%d.%d\n", v[0], v[1], v[2]);
  } else if (!strcmp(family, "cudnn")) { /* cuDNN 9: major * 10000 + minor * 100 + patch */
    size_t (*get)(void) = (size_t (*)(void))dlsym(lib, "cudnnGetVersion");
    if (!get) return 1;
    size_t v = get();
    printf("%zu.%zu.%zu\n", v / 10000, v / 100 % 100, v % 100);
  } else if (!strcmp(family, "nccl")) { /* NCCL 2.9+: the same coding */
    int (*get)(int *) = (int (*)(int *))dlsym(lib, "ncclGetVersion");
    int v = 0;
    if (!get || get(&v) != 0) return 1;
    printf("%d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
  } else return 2;
  return 0;
}
int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "version")) return version(argv[2], argv[3]);
  if (argc < 2 || strcmp(argv[1], "open")) {
    fprintf(stderr, "usage: dptrain_libprobe version cublas|cudnn|nccl LIB | open LIB...\n");
    return 2;
  }
  int failed = 0;
  for (int i = 2; i < argc; i++) {
    if (dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) printf("ok\t%s\n", argv[i]);
    else { printf("FAILED\t%s\t%s\n", argv[i], dlerror()); failed = 1; }
  }
  return failed;
}
C
  cc -O2 -o "$1" "$src" -ldl
  local rc=$?
  rm -f "$src"
  return "$rc"
}
if [[ ${1:-} == --probe ]]; then build_probe "${2:?--probe FILE}"; exit; fi

build=${BUILD_DIR:-build-gpu}
out=${BUNDLE_OUT:-.gpu-bundle}
limit=$((64 << 20))
note() { echo "gpu-bundle: $*"; }
targets=(dptrain gpu_tests dptrain_bench dptrain_gpt_bench dptrain_nccl_rate dptrain_conv_layout)
binaries=("$build/dptrain" "$build/tests/gpu_tests" "$build/tools/bench/dptrain_bench"
  "$build/tools/bench/dptrain_gpt_bench" "$build/tools/bench/dptrain_nccl_rate"
  "$build/tools/bench/dptrain_conv_layout")

# What the GPU machine brings: glibc, the driver, the CUDA libraries.
from_machine='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2'
from_machine+='|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libcuda\.so\.1|libnvidia-ml\.so\.1'
from_machine+='|libcublas\.so\.13|libcublasLt\.so\.13|libnccl\.so\.2|libcudnn[a-z_]*\.so\.9)$'
# Network transports one node does not need, and what only they or unused
# plugins need (tools/gpu-deps.sh leaves them out).
left_out='^(libfabric\.so\.1|libuc[pstm]\.so\.0|libibverbs\.so\.1|librdmacm\.so\.1|libpsm.*'
left_out+='|libnl-.*|libxml2\.so\.2|libX11\.so\.6|libpciaccess\.so\.0|libdb-5\.3\.so)$'
# Loaded with dlopen, never NEEDED: Open MPI and PMIx components, Open MPI's
# common libraries of the transports, SASL mechanisms (Berkeley DB: left out).
plugin='/(openmpi|pmix|sasl2)/|/libmca_common_(ucx|verbs|ofi)\.'

if [[ ${NO_BUILD:-0} != 1 ]]; then
  [[ -f $build/CMakeCache.txt ]] || cmake -S . -B "$build" -DDPTRAIN_CUDA=ON
  cmake --build "$build" -j"${JOBS:-$(nproc)}" --target "${targets[@]}"
fi
for b in "${binaries[@]}"; do [[ -x $b ]] || { note "missing $b (build it first)"; exit 1; }; done
if [[ ${DEPS_REFRESH:-0} == 1 || ! -x .gpu-deps/root/usr/bin/orterun ]]; then tools/gpu-deps.sh; fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
for b in "${binaries[@]}"; do strip --strip-all -o "$stage/bin/$(basename "$b")" "$b"; done
build_probe "$stage/bin/dptrain_libprobe"
# The check itself, for a GPU machine that gets the tarball alone.
mkdir -p "$stage/tools"
cp tools/gpu-check.sh tools/gpu-check-env.sh tools/gpu-check-tests.sh tools/gpu-check-gpt.sh \
  tools/gpu-check-torch.py tools/gpu-check-kernels.py tools/make_synthetic.py tools/convert_text.py \
  "$stage/tools/"
cp -a .gpu-deps/root "$stage/root"
cp -a .gpu-deps/fallback "$stage/fallback"
[[ -f .gpu-deps/synthetic.h5 ]] && cp .gpu-deps/synthetic.h5 "$stage/data/"
# The GPT rows' token set (about 190 kB; the GPU machine may lack h5py).
if ! { py=$(tools/find-python.sh) && "$py" tools/convert_text.py README.md docs \
  --output "$stage/data/gpt_text.h5" --window 64 >/dev/null; }; then
  note "no token set for the GPT rows (tools/convert_text.py needs python3-h5py): the check makes one if it can"
fi
cudart=$(ldd "$build/dptrain" | awk '$1 ~ /^libcudart\.so/ {print $3}')
[[ -n $cudart ]] && cp -L "$cudart" "$stage/lib/"

elf_files() { find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c \
  'for f; do head -c4 "$f" | grep -q "ELF" && echo "$f"; done' sh {} +; }
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# Every file name in the bundle, symlinks included: what NEEDED can resolve to.
names=$(find "$stage" \( -type f -o -type l \) -name '*.so*' -printf '%f\n' | sort -u)
have() { grep -qxF "$1" <<<"$names"; }

missing=()
for f in $(elf_files); do
  for lib in $(needed "$f"); do
    have "$lib" || [[ $lib =~ $from_machine ]] && continue
    if [[ $lib =~ $left_out && $f =~ $plugin ]]; then
      note "dropping plugin $(basename "$f") (needs $lib, left out)"
      rm -f "$f"
      break
    fi
    missing+=("${f#"$stage"/} needs $lib")
  done
done
if ((${#missing[@]})); then
  note "not in the bundle and not brought by the GPU machine:"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi

newest_glibc() { objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1; }
# shellcheck disable=SC2046
glibc=$(newest_glibc $(elf_files))
glibc_bin=$(newest_glibc "$stage"/bin/*)
machine_libs=$(for f in $(elf_files); do needed "$f"; done | sort -u | grep -E "$from_machine" |
  grep -E '^lib(cuda|nvidia|cublas|nccl|cudnn)' | tr '\n' ' ')
# Opened by the CUDA backend when it starts (src/backends/cuda/cublas_api.cpp),
# so no binary names them as NEEDED: found beside this build's libcudart.
cuda_lib_dir=$(dirname "${cudart:-/usr/local/cuda/lib64/libcudart.so}")
opened_libs=(libcublas.so.13 libcublasLt.so.13)
machine_libs+="${opened_libs[*]} "
{
  echo "glibc=$glibc"
  echo "glibc_binaries=$glibc_bin (the rest: Debian's libraries, e.g. libevent's arc4random)"
  echo "from_machine=$machine_libs"
  # The versions the binaries were built against, read from the libraries they link here.
  for fam in cublas:libcublas.so.13 cudnn:libcudnn.so.9 nccl:libnccl.so.2; do
    path=$(ldd "$build/dptrain" "$build/tests/gpu_tests" | awk -v l="${fam#*:}" '$1 == l && !n++ {print $3}')
    [[ -z $path && -e $cuda_lib_dir/${fam#*:} ]] && path=$cuda_lib_dir/${fam#*:}
    [[ -n $path ]] || continue
    v=$("$stage/bin/dptrain_libprobe" version "${fam%%:*}" "$path") && echo "${fam%%:*}=$v"
  done
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +changes)"
  echo "built=$(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
} >"$stage/MANIFEST"

mkdir -p "$out"
rm -f "$out"/dptrain-gpu.tar.*
tar -C "$stage" -czf "$out/dptrain-gpu.tar.gz" .
cp "$stage/MANIFEST" "$out/MANIFEST"
size=$(stat -c %s "$out/dptrain-gpu.tar.gz")
note "$(awk -v s="$size" 'BEGIN{printf "%.1f MiB", s/1048576}') packed ($(du -sh "$stage" | cut -f1) unpacked) in $out/dptrain-gpu.tar.gz"
note "needs glibc >= $glibc (dptrain's own binaries: $glibc_bin); from the GPU machine: $machine_libs"
if ((size > limit)); then note "over the 64 MiB a GPU machine takes"; exit 1; fi
