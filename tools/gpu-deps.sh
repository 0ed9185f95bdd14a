#!/usr/bin/env bash
# Implements: a relocatable tree of the runtime libraries dptrain needs, for a
# GPU machine that has the NVIDIA driver (and CUDA libraries, from a toolkit
# or PyTorch's wheels) but no Open MPI, HDF5, Boost, oneDNN or BLAS (and no
# network). Run here (Debian, apt, network):
#   tools/gpu-deps.sh            -> .gpu-deps/root (+ .gpu-deps/fallback, .gpu-deps/synthetic.h5)
# tools/gpu-bundle.sh runs it and packs the tree with the binaries into the
# one carried path; tools/gpu-check.sh runs from that bundle.
#
# Size matters (the bundle travels with the tree, 64 MiB in all), so:
#  - OpenBLAS (36 MiB) is replaced by a 16 KiB shim libopenblas.so.0 over the
#    reference BLAS (libblas3): on the GPU machine BLAS only serves the CPU
#    reference inside gpu_tests, where speed does not matter. BLAS=openblas
#    takes the real one instead.
#  - Open MPI's network transports (UCX, libfabric, PSM, verbs) are left out:
#    one node needs only shared memory (btl vader); tools/gpu-bundle.sh drops
#    the plugins that would need them, so every plugin left must load.
#  - libmunge2 stays: libpmix.so.2 needs it (without it orterun stops with
#    "orte_init failed ... opal_pmix_base_select failed").
#  - oneDNN (libdnnl2, 40 MB, with libgomp1 and the OpenCL loader it links)
#    serves the CPU backend, the reference inside gpu_tests.
#  - libstdc++/libgcc go to fallback/, used only when the GPU machine's own
#    are too old for this build.
set -euo pipefail
cd "$(dirname "$0")/.."

out=.gpu-deps
blas=${BLAS:-shim}
roots=(openmpi-bin libopenmpi3 openmpi-common libhdf5-103-1 libboost-program-options1.74.0
  libdnnl2 libgomp1 ocl-icd-libopencl1 libmunge2 zlib1g)
if [[ $blas == openblas ]]; then roots+=(libopenblas0-pthread); else roots+=(libblas3); fi

# Present on any Linux that runs PyTorch, never used by us, or deliberately
# left out (see above). Regular expressions over package names.
exclude='^(adduser|cdebconf|debconf|dpkg|install-info|passwd|tar|readline-common|gcc-[0-9]+-base'
exclude+='|libc6|libcrypt1|libacl1|libaudit.*|libcap-ng0|libdb5\.3|libdebian-installer4|libnewt.*'
exclude+='|libpam.*|libselinux1|libsemanage.*|libsepol.*|libslang2|libtextwrap1|libreadline8|libtinfo6'
exclude+='|openssh-client|libedit2|libfido2-1|libcbor.*|libbsd0|libmd0'
exclude+='|libfabric1|libucx0|libpsm.*|libibverbs1|librdmacm1|ibverbs-providers|libnl-.*'
exclude+='|libhwloc-plugins|libx11.*|libxau6|libxcb1|libxdmcp6|libxext6|libxnvctrl0'
exclude+='|libxml2|libicu[0-9]+|libpciaccess0)$'
fallback_pkgs=(libstdc++6 libgcc-s1)

mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${roots[@]}" 2>/dev/null |
  grep -v '^[ <]' | sort -u | grep -Ev "$exclude" | grep -Ev '^(libstdc\+\+6|libgcc-s1)$')
echo "gpu-deps: ${#pkgs[@]} packages: ${pkgs[*]}"

rm -rf "$out/debs" "$out/root" "$out/fallback"
mkdir -p "$out/debs" "$out/root" "$out/fallback"
(cd "$out/debs" && apt-get download -q "${pkgs[@]}" "${fallback_pkgs[@]}" >/dev/null)
for deb in "$out"/debs/*.deb; do
  case $(basename "$deb") in
    libstdc++6_* | libgcc-s1_*) dpkg-deb -x "$deb" "$out/fallback" ;;
    *) dpkg-deb -x "$deb" "$out/root" ;;
  esac
done
rm -rf "$out/debs"

# Docs, manuals, locales, headers and static libraries are not needed to
# run; Open MPI's help texts (share/openmpi) are, for readable errors.
root=$out/root
find "$root/usr/share" -mindepth 1 -maxdepth 1 ! -name openmpi -exec rm -rf {} +
rm -rf "$root/usr/include" "$root/usr/lib/x86_64-linux-gnu/pkgconfig"
find "$root" \( -name '*.a' -o -name '*.la' \) -delete
rm -rf "$out/fallback/usr/share"

lib=$root/usr/lib/x86_64-linux-gnu
if [[ $blas != openblas ]]; then
  # dptrain links libopenblas.so.0 and calls cblas_sgemm and
  # openblas_set_num_threads: the shim supplies the latter and pulls the
  # reference cblas in through its NEEDED entry.
  shim_src=$(mktemp --suffix=.c)
  echo 'void openblas_set_num_threads(int n) { (void)n; }' >"$shim_src"
  cc -shared -fPIC -O2 -o "$lib/libopenblas.so.0" "$shim_src" \
    -Wl,-soname,libopenblas.so.0 -Wl,--no-as-needed -L"$lib/blas" -l:libblas.so.3
  rm -f "$shim_src"
fi

# Debian reaches the BLAS through alternatives symlinks under /etc, which an
# unpacked tree lacks: put the library where the loader will look.
for d in blas openblas-pthread; do
  for f in "$lib/$d"/lib*.so.*; do [[ -e $f ]] && ln -sf "$d/$(basename "$f")" "$lib/$(basename "$f")"; done
done

# Debian names mpirun through /etc/alternatives, which the tree lacks.
ln -sf orterun "$root/usr/bin/mpirun"

# A small synthetic data set for the GPU check (the GPU machine may lack h5py).
if py=$(tools/find-python.sh 2>/dev/null) && [[ -f tools/make_synthetic.py ]]; then
  "$py" tools/make_synthetic.py "$out/synthetic.h5" --n 8192 --val-n 1024 --shape 28,28 \
    --classes 10 --dtype uint8 --seed 1 >/dev/null
else
  echo "gpu-deps: no python3 with h5py here: gpu-check.sh will need one on the GPU machine" >&2
fi

echo "gpu-deps: $(du -sh "$out" | cut -f1) in $out (root $(du -sh "$root" | cut -f1))"
