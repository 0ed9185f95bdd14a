# shellcheck shell=bash disable=SC2034,SC2154  # sets the tool paths that gpu-check.sh uses; uses its work, tmp, mpirun
# Implements: the set-up half of tools/gpu-check.sh (sourced, not run):
# keep the environment the check started with, find the Python that holds
# PyTorch, unpack the bundle of tools/gpu-bundle.sh, check glibc, find the
# CUDA libraries the GPU machine brings (the versions the bundle was built
# against first), point Open MPI at the unpacked tree, `ldd -r` every
# program and `ldd` every library and plugin, open each cuDNN sub-library
# once, and launch `orterun -n 1 true` once, as the real runs launch.
# Each step adds rows through row(), writes what it saw under $work (the
# logs folder), and returns non-zero when the check cannot go on, after
# naming what is missing.

# save_start_env: the environment as the check found it; as_started CMD...
# runs CMD in it. Python and PyTorch run so: under the bundle's
# LD_LIBRARY_PATH (Debian's libssl, libffi, zlib, libgomp and the bundled
# cudart ahead of the image's) an import that works there can fail.
save_start_env() { mapfile -d '' start_env < <(env -0); }
as_started() { env -i "${start_env[@]}" "$@"; }

# Where GPU images keep the Python that holds PyTorch: a virtual
# environment of its own (e.g. /opt/torch/.venv), a conda prefix, or the
# python3 on the PATH. DPTRAIN_TORCH_PYTHON names it outright.
python_candidates() {
  local c home=${HOME:-/root}
  for c in "${DPTRAIN_TORCH_PYTHON:-}" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" \
    "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}" "$(command -v python3)" "$(command -v python)" \
    /opt/*/.venv/bin/python /opt/*/venv/bin/python /opt/venv/bin/python /opt/conda/bin/python \
    /opt/conda/envs/*/bin/python "$home"/.venv/bin/python "$home"/venv/bin/python \
    "$home"/*/.venv/bin/python /workspace/.venv/bin/python /usr/local/bin/python3 /usr/bin/python3; do
    [[ -n $c && -x $c && ! -d $c ]] && echo "$c"
  done | awk '!seen[$0]++'
}

# find_python: sets py to the first candidate that imports torch (and
# torch_version), else to the first that runs at all (make_synthetic.py
# needs no torch); every attempt goes to $work/python.txt.
find_python() {
  local c v first='' tried=0
  py='' torch_version=''
  : >"$work/python.txt"
  while read -r c; do
    [[ -n $first ]] || first=$c
    tried=$((tried + 1))
    v=$(as_started timeout -k 5 120 "$c" -c 'import torch; print(torch.__version__)' 2>>"$work/python.txt" | tail -1)
    echo "$c: ${v:-cannot import torch}" >>"$work/python.txt"
    if [[ -n $v ]]; then
      py=$c torch_version=$v
      break
    fi
  done < <(python_candidates)
  if [[ -n $py ]]; then
    row setup PyTorch "torch $torch_version" "$py"
  else
    py=$first
    row setup PyTorch none "none of $tried Pythons imports torch (logs/python.txt); ${py:-no Python at all}"
  fi
}

# unpack_bundle TARBALL DIR: sets B (the unpacked root) and the tool paths.
# A folder instead of TARBALL is used in place.
unpack_bundle() {
  if [[ -d $1 ]]; then
    B=$1
  elif ! mkdir -p "$2" || ! tar -C "$2" -xzf "$1"; then
    row setup bundle FAILED "cannot unpack $1"
    return 1
  else
    B=$2
  fi
  dptrain=$B/bin/dptrain gpu_tests=$B/bin/gpu_tests
  bench=$B/bin/dptrain_bench nccl_rate=$B/bin/dptrain_nccl_rate conv_layout=$B/bin/dptrain_conv_layout
  gpt_bench=$B/bin/dptrain_gpt_bench
  probe=$B/bin/dptrain_libprobe
  root=$B/root
  row setup bundle ok "$(basename "$1"), $(du -shL "$1" 2>/dev/null | cut -f1); $(grep '^commit=' "$B/MANIFEST" | cut -d= -f2)"
}

# The bundle was built where glibc is new (Debian 12: 2.36); what it needs
# is the newest GLIBC_ symbol version in it, written to MANIFEST.
check_glibc() {
  local need have
  need=$(sed -n 's/^glibc=//p' "$B/MANIFEST")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [[ -n $have ]] || have=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]\+\.[0-9]\+$')
  if [[ -z $have ]]; then
    row setup glibc FAILED "needs glibc >= $need; this machine's version cannot be read (musl?)"
    return 1
  fi
  if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
    row setup glibc FAILED "needs glibc >= $need, this machine has $have: build the bundle on an older distribution"
    return 1
  fi
  row setup glibc ok "has $have, needs >= $need"
}

# CUDA 13 runtime libraries: folders named in DPTRAIN_CUDA_LIB_DIRS, the
# toolkit's, and the pip wheels that came with PyTorch
# (site-packages/nvidia/*/lib); libcudart travels in the bundle. One line
# each, a folder reached twice (lib64 is a link to targets/.../lib) once.
cuda_lib_dirs() {
  local d dirs=()
  IFS=: read -ra dirs <<<"${DPTRAIN_CUDA_LIB_DIRS:-}"
  dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  if [[ -n $py ]]; then
    mapfile -t -O "${#dirs[@]}" dirs < <(as_started "$py" - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for sp in roots:
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
        print(d)
PY
    )
  fi
  for d in "${dirs[@]}"; do [[ -n $d && -d $d ]] && echo "$(readlink -f "$d") $d"; done |
    awk '!seen[$1]++ {print $2}'
}

# The CUDA libraries the bundle links, by family: the library whose
# version dptrain_libprobe reads, and the files that must come from the
# same folder (cuBLAS with cuBLASLt; cuDNN with its sub-libraries, which it
# loads at run time).
cuda_families=("cublas libcublas.so.13 libcublas*.so.13" "cudnn libcudnn.so.9 libcudnn*.so.9"
  "nccl libnccl.so.2 libnccl.so.2")

# pick_version WANT < "VERSION FOLDER" lines -> the line to use: the version
# the bundle was built against, else the newest of its major.minor, else
# the oldest newer one (a newer minor keeps the older's symbols), else the
# newest older one; without WANT, or with no version read, the first line.
pick_version() {
  local want=$1 lines
  lines=$(cat)
  [[ -n $lines ]] || return 0
  if [[ -z $want ]] || ! grep -q '^[0-9]' <<<"$lines"; then head -1 <<<"$lines"; return 0; fi
  lines=$(grep '^[0-9]' <<<"$lines")
  local exact mm newer older
  exact=$(awk -v w="$want" '$1 == w' <<<"$lines" | head -1)
  mm=$(awk -v w="${want%.*}" 'index($1, w ".") == 1' <<<"$lines" | sort -V -k1,1 | tail -1)
  newer=$( (echo "$want ="; cat <<<"$lines") | sort -V -k1,1 | awk '$2 == "=" {on = 1; next} on' | head -1)
  older=$( (cat <<<"$lines"; echo "$want =") | sort -V -k1,1 | awk '$2 == "=" {exit} {print}' | tail -1)
  echo "${exact:-${mm:-${newer:-$older}}}"
}

# choose_cuda_libs: reads each family's version in every folder and links
# the chosen folder's files into $tmp/cuda-libs, which goes first on the
# library path; sets cuda_dirs (all folders) and cuda_libs_detail. Without
# the probe (a bundle folder made otherwise) the folders' order decides.
choose_cuda_libs() {
  local fam name main glob d v want line dir detail=() lines
  cuda_dirs=$(cuda_lib_dirs | paste -sd:)
  cuda_chosen=
  [[ -n $cuda_dirs ]] || return 0
  if [[ ! -x $probe ]]; then
    cuda_libs_detail="$cuda_dirs (versions not read: no dptrain_libprobe in the bundle)"
    return 0
  fi
  cuda_chosen=$tmp/cuda-libs
  mkdir -p "$cuda_chosen"
  : >"$work/cuda-libs.txt"
  for fam in "${cuda_families[@]}"; do
    read -r name main glob <<<"$fam"
    want=$(sed -n "s/^$name=//p" "$B/MANIFEST")
    lines=$(IFS=:; for d in $cuda_dirs; do
      [[ -e $d/$main ]] || continue
      v=$(LD_LIBRARY_PATH=$d "$probe" version "$name" "$d/$main" 2>>"$work/cuda-libs.txt")
      echo "${v:-unreadable} $d"
    done)
    printf '%s (built with %s):\n%s\n' "$name" "${want:-?}" "${lines:-  none}" >>"$work/cuda-libs.txt"
    line=$(pick_version "$want" <<<"$lines")
    if [[ -z $line ]]; then
      [[ -z $want ]] || detail+=("$name: none found")
      continue
    fi
    dir=${line#* }
    for d in "$dir"/$glob; do [[ -e $d ]] && ln -sf "$d" "$cuda_chosen/"; done
    detail+=("$name ${line%% *}${want:+ (built with $want)} from $dir")
  done
  echo "chosen: ${detail[*]}" >>"$work/cuda-libs.txt"
  cuda_libs_detail=$(printf '%s; ' "${detail[@]}")
  cuda_libs_detail=${cuda_libs_detail%; }
}

setup_env() {
  lib=$root/usr/lib/x86_64-linux-gnu
  if [[ -x $root/usr/bin/orterun ]]; then
    export OPAL_PREFIX=$root/usr PMIX_INSTALL_PREFIX=$lib/pmix2
    export PATH=$root/usr/bin:$PATH
  else  # a folder without the bundled runtime: the machine's Open MPI
    row setup "Open MPI" "the machine's" "$(command -v orterun || echo "no orterun on PATH")"
  fi
  # One node, no ssh needed: Open MPI 4.1 would still pick its ssh/rsh
  # launcher and stop when neither exists ("plm_rsh_agent: ssh : rsh").
  export OMPI_MCA_plm=isolated
  # Shared memory only; the network transports are not in the bundle.
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
  export OMPI_MCA_mca_base_component_show_load_errors=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Sandboxes (gVisor, some containers): PMIx's shared-memory store fails
  # on its locks, so the hash store; no cross-memory attach between ranks.
  export PMIX_MCA_gds=hash OMPI_MCA_btl_vader_single_copy_mechanism=none
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  # hwloc: no messages about a machine it cannot read (the launch is judged
  # by its exit code), and none of the image's own hwloc plugins, built for
  # another hwloc than the bundle's.
  mkdir -p "$tmp/hwloc-plugins"
  export HWLOC_HIDE_ERRORS=2 HWLOC_PLUGINS_PATH=$tmp/hwloc-plugins
  choose_cuda_libs
  local libs=$lib:$root/lib/x86_64-linux-gnu:$B/lib${cuda_chosen:+:$cuda_chosen}${cuda_dirs:+:$cuda_dirs}
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  row setup "CUDA libraries" "$([[ -n $cuda_dirs ]] && echo found || echo "NOT FOUND")" \
    "${cuda_libs_detail:-${cuda_dirs:-no /usr/local/cuda and no PyTorch nvidia-* wheels}}"
}

# ldd over every ELF file of the bundle: binaries, libraries, Open MPI and
# PMIx plugins (a plugin that does not load makes orterun fail later with
# an opaque message). `ldd -r` (every symbol resolved: an older cuBLAS than
# the build's loads, then lacks a function) for the programs and the
# bundle's lib/, which covers every library they load; Open MPI's plugins
# and common libraries take their symbols from the library that loads
# them, so ldd -r would find them all wanting. Falls back to the bundled
# libstdc++ when the machine's is older than the build's. Everything ldd
# printed goes to $work/ldd.txt.
elf_list() {
  local d dirs=()
  for d in "$B/bin" "$B/lib" "$root"; do [[ -d $d ]] && dirs+=("$d"); done
  find "${dirs[@]}" -type f -name '*.so*' -o -type f -path "$B/bin/*" | sort
}
unresolved() {
  local f out
  : >"$work/ldd.txt"
  while read -r f; do
    if [[ $f == "$B"/bin/* || $f == "$B"/lib/* ]]; then out=$(ldd -r "$f" 2>&1) || continue
    else out=$(ldd "$f" 2>&1) || continue; fi
    printf '== %s\n%s\n' "${f#"$B"/}" "$out" >>"$work/ldd.txt"
    grep -E 'not found|undefined symbol' <<<"$out" | sed "s|^|${f#"$B"/}: |"
  done < <(elf_list)
}
check_libraries() {
  local missing
  missing=$(unresolved)
  if grep -q "GLIBCXX\|CXXABI\|GCC_" <<<"$missing"; then
    export LD_LIBRARY_PATH=$B/fallback/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
    row setup libstdc++ "bundled" "the machine's libstdc++/libgcc_s are older than the build's"
    missing=$(unresolved)
  fi
  if [[ -n $missing ]]; then
    note "libraries or symbols not found (ldd -r; all of it in logs/ldd.txt):"
    echo "$missing" | head -40 | sed 's/^/  /' >&2
    local libs syms
    libs=$(grep -o '[^ 	]*\.so[^ ]* => not found' <<<"$missing" | sort -u | cut -d' ' -f1 | paste -sd' ')
    syms=$(grep -o 'undefined symbol: [^ 	]*[ 	]*([^)]*)' <<<"$missing" |
      sed 's/undefined symbol: \([^ 	]*\)[ 	]*(\(.*\))/\1 (\2)/; s|([^)]*/|(|' | sort -u | head -5 | paste -sd' ')
    row setup "ldd (-r: every symbol of the programs; all libraries, plugins)" FAILED \
      "${libs:+not found: $libs}${libs:+${syms:+; }}${syms:+undefined symbols: $syms}"
    return 1
  fi
  row setup "ldd (-r: every symbol of the programs; all libraries, plugins)" ok "$(elf_list | wc -l) files resolve"
}

# check_cudnn: opens each cuDNN sub-library once (dlopen), as cuDNN does at
# run time where ldd never looks, and names those that fail. The tests go
# on either way: only the convolution rows need them.
check_cudnn() {
  [[ -x $probe && -n $cuda_chosen ]] || return 0
  local libs=("$cuda_chosen"/libcudnn*.so.9) out bad
  [[ -e ${libs[0]} ]] || return 0
  # libcudnn.so.9 first, as the binaries load it.
  out=$(timeout -k 5 60 "$probe" open "$cuda_chosen/libcudnn.so.9" "${libs[@]}" 2>&1)
  echo "$out" >"$work/cudnn-dlopen.txt"
  bad=$(awk -F'\t' '$1 == "FAILED" {n = split($2, p, "/"); printf "%s%s: %s", sep, p[n], $3; sep = "; "}' <<<"$out")
  if [[ -n $bad ]]; then
    note "cuDNN sub-libraries that do not load: $bad"
    row setup "cuDNN sub-libraries (dlopen)" FAILED "$bad"
  else
    row setup "cuDNN sub-libraries (dlopen)" ok "${#libs[@]} load: ${libs[*]##*/}"
  fi
}

# One rank of /bin/true launched as the real runs are (the flags of
# mpirun), with load errors shown, judged by its exit code alone (Open MPI
# and hwloc print warnings that say "error" at exit 0). hwloc 2.9 aborts
# where the sysfs CPU topology is missing (older gVisor): a failed launch
# is tried once more on a synthetic topology, which then stays for every
# launch. On failure names the missing pieces it printed.
smoke_launch() {
  local rc first="" what detail version
  timeout -k 5 60 "${mpirun[@]}" -n 1 true >"$work/smoke.txt" 2>&1
  rc=$?
  if ((rc != 0)); then
    first=$rc
    HWLOC_SYNTHETIC="package:1 core:$(nproc 2>/dev/null || echo 1) pu:1"
    export HWLOC_SYNTHETIC
    note "orterun -n 1 true: exit $rc on the machine's topology; once more with HWLOC_SYNTHETIC=\"$HWLOC_SYNTHETIC\""
    timeout -k 5 60 "${mpirun[@]}" -n 1 true >"$work/smoke-synthetic.txt" 2>&1
    rc=$?
    ((rc == 0)) || unset HWLOC_SYNTHETIC
  fi
  version=$(timeout 20 orterun --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')
  if ((rc == 0)); then
    if [[ -n $first ]]; then
      detail="Open MPI $version; on the machine's topology exit $first (logs/smoke.txt), on a synthetic one (HWLOC_SYNTHETIC=\"$HWLOC_SYNTHETIC\") ok: kept for every launch"
    else
      detail="Open MPI $version, the machine's topology"
      [[ -s $work/smoke.txt ]] && detail+="; it printed $(wc -l <"$work/smoke.txt") lines (logs/smoke.txt)"
    fi
    row setup "smoke launch (orterun -n 1 true)" ok "$detail"
    return 0
  fi
  note "orterun -n 1 true failed (exit $first, then $rc with a synthetic topology):"
  cat "$work/smoke.txt" "$work/smoke-synthetic.txt" | head -40 | sed 's/^/  /' >&2
  what=$(cat "$work/smoke.txt" "$work/smoke-synthetic.txt" | grep -oE "lib[A-Za-z0-9_.+-]*\.so[.0-9]*: cannot open|plm_rsh_agent|orte_init failed|pmix[a-z_]* failed|mca_[a-z0-9_]*|hwloc[^ ]*" | sort -u | tr '\n' ' ')
  row setup "smoke launch (orterun -n 1 true)" FAILED "exit $first, then $rc on a synthetic topology: ${what:-see logs/smoke.txt}"
  return 1
}

# record_environment: what the check saw, for a run whose console is lost:
# env-start.txt (as started), env-check.txt (as the runs see it),
# machine.txt (kernel, distribution, CPUs, memory, the driver, nvidia-smi,
# nvcc, the bundle's MANIFEST).
record_environment() {
  printf '%s\n' "${start_env[@]}" | sort >"$work/env-start.txt"
  env | sort >"$work/env-check.txt"
  {
    echo "== uname -a"; uname -a
    echo "== /etc/os-release"; cat /etc/os-release
    echo "== glibc"; getconf GNU_LIBC_VERSION
    echo "== nproc $(nproc), id $(id)"
    echo "== free -m"; free -m
    echo "== df -h"; df -h "$tmp" "$work"
    echo "== MANIFEST"; cat "$B/MANIFEST"
    echo "== /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
    echo "== /dev/nvidia*"; ls -l /dev/nvidia*
    echo "== nvidia-smi"; as_started timeout 30 nvidia-smi
    echo "== nvidia-smi -q"; as_started timeout 30 nvidia-smi -q
    echo "== nvcc --version"; as_started timeout 30 nvcc --version || timeout 30 /usr/local/cuda/bin/nvcc --version
    echo "== CUDA library folders"; tr ':' '\n' <<<"${cuda_dirs:-}"
    echo "== Pythons"; cat "$work/python.txt"
  } >"$work/machine.txt" 2>&1
}
