# shellcheck shell=bash disable=SC2034  # sets the tool paths that gpu-check.sh uses
# Implements: the set-up half of tools/gpu-check.sh (sourced, not run):
# unpack the bundle of tools/gpu-bundle.sh, check glibc, find the CUDA
# libraries the GPU machine brings, point Open MPI at the unpacked tree, ldd
# every binary, library and plugin, and launch `orterun -n 1 true` once.
# Each step adds rows through row() and returns non-zero when the check
# cannot go on, after naming what is missing.

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
  root=$B/root
  row setup bundle ok "$(basename "$1"), $(du -shL "$1" | cut -f1); $(grep '^commit=' "$B/MANIFEST" | cut -d= -f2)"
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

# CUDA 13 runtime libraries: the toolkit's, else the pip wheels that came
# with PyTorch (site-packages/nvidia/*/lib); libcudart travels in the bundle.
cuda_lib_dirs() {
  local d dirs=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && dirs+=("$d")
  done
  if [[ -n $py ]]; then
    mapfile -t -O "${#dirs[@]}" dirs < <("$py" - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for sp in roots:
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
        print(d)
PY
    )
  fi
  (IFS=:; echo "${dirs[*]}")
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
  export HWLOC_HIDE_ERRORS=1
  cuda_dirs=$(cuda_lib_dirs)
  local libs=$lib:$root/lib/x86_64-linux-gnu:$B/lib${cuda_dirs:+:$cuda_dirs}
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  row setup "CUDA libraries" "$([[ -n $cuda_dirs ]] && echo found || echo "NOT FOUND")" \
    "${cuda_dirs:-no /usr/local/cuda and no PyTorch nvidia-* wheels}"
}

# ldd over every ELF file of the bundle: binaries, libraries, Open MPI and
# PMIx plugins (a plugin that does not load makes orterun fail later with
# an opaque message). Falls back to the bundled libstdc++ when the
# machine's is older than the build's.
elf_list() {
  local d dirs=()
  for d in "$B/bin" "$B/lib" "$root"; do [[ -d $d ]] && dirs+=("$d"); done
  find "${dirs[@]}" -type f -name '*.so*' -o -type f -path "$B/bin/*" | sort
}
unresolved() {
  local f out
  while read -r f; do
    out=$(ldd "$f" 2>&1) || continue
    grep -E 'not found' <<<"$out" | sed "s|^|${f#"$B"/}: |"
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
    note "libraries not found (ldd):"
    echo "$missing" | sed 's/^/  /'
    row setup "ldd (all binaries, libraries, plugins)" FAILED \
      "$(echo "$missing" | grep -o '[^ 	]*\.so[^ ]* => not found' | sort -u | cut -d' ' -f1 | tr '\n' ' ')"
    return 1
  fi
  row setup "ldd (all binaries, libraries, plugins)" ok "$(elf_list | wc -l) files resolve"
}

# One rank of /bin/true under orterun: PMIx, plugins and the launcher, with
# load errors shown; on failure names the missing pieces it printed.
smoke_launch() {
  local out rc
  out=$(timeout -k 5 60 orterun -n 1 true 2>&1)
  rc=$?
  if ((rc == 0)) && ! grep -qi "error\|failed\|cannot open" <<<"$out"; then
    row setup "smoke launch (orterun -n 1 true)" ok "Open MPI $(orterun --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')"
    return 0
  fi
  note "orterun -n 1 true failed (exit $rc):"
  echo "$out" | head -30 | sed 's/^/  /'
  local what
  what=$(grep -oE "lib[A-Za-z0-9_.+-]*\.so[.0-9]*: cannot open|plm_rsh_agent|orte_init failed|pmix[a-z_]* failed|mca_[a-z0-9_]*" <<<"$out" | sort -u | tr '\n' ' ')
  row setup "smoke launch (orterun -n 1 true)" FAILED "exit $rc: ${what:-see the output above}"
  return 1
}
