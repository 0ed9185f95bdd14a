#!/usr/bin/env bash
# Implements: a bounded libFuzzer run over dptrain's HDF5 readers (data files,
# checkpoints, inspect): installs clang and its libFuzzer runtime if missing,
# builds tests/fuzz in its own ASan build directory, makes a seed corpus on
# the fly (nothing binary is committed) and fuzzes for SECONDS.
#   tools/fuzz.sh [SECONDS]        default 60; exits non-zero on any finding
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default: all cores).
# A finding is left in $FUZZ_BUILD_DIR/artifacts/; replay it with
#   $FUZZ_BUILD_DIR/tests/fuzz/fuzz_readers ARTIFACT
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc)}

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
apt_install() {
  echo "fuzz: installing $*"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# Whether clang++ can build and link a libFuzzer program (Debian ships the
# runtime apart from the compiler, in libclang-rt-N-dev from clang 14 on).
links_fuzzer() {
  local dir
  dir=$(mktemp -d)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/t.cpp"
  "$1" -fsanitize=fuzzer,address "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}

if ! command -v clang++ >/dev/null; then
  $sudo apt-get update -q
  apt_install clang
fi
major=$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
if ! links_fuzzer clang++; then
  # The runtime package of this clang's major version, whichever name it has.
  for p in "libclang-rt-$major-dev" "libclang-common-$major-dev"; do
    if ! installed "$p" && apt-cache show "$p" >/dev/null 2>&1; then
      apt_install "$p"
      break
    fi
  done
  links_fuzzer clang++ || { echo "fuzz: clang++ $major cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi
python=$(tools/find-python.sh)

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DDPTRAIN_FUZZ=ON -DDPTRAIN_CUDA=OFF -DDPTRAIN_TESTS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_readers make_seed_checkpoint

# --- seeds: valid data files of each kind, malformed ones, checkpoints -------
seeds="$build/seeds"
rm -rf "$seeds" "$build/bad"
mkdir -p "$seeds" "$build/artifacts" "$build/corpus"
"$python" tools/make_synthetic.py "$seeds/class-f32.h5" --n 24 --val-n 8 --shape 6 --classes 3 >/dev/null
"$python" tools/make_synthetic.py "$seeds/class-u8.h5" --n 16 --val-n 4 --shape 2,3 \
  --dtype uint8 --classes 4 --sets train >/dev/null
"$python" tools/make_synthetic.py "$seeds/targets.h5" --n 16 --val-n 4 --shape 5 --regression 2 >/dev/null
"$python" tools/make_bad_data.py "$build/bad" >/dev/null
for name in missing_labels features_rank1 n_mismatch label_negative feature_nan target_nan not_hdf5; do
  cp "$build/bad/$name.h5" "$seeds/bad-$name.h5"
done
# ASan's leak check stays on for the fuzzer; the seed writer is not under test.
ASAN_OPTIONS=detect_leaks=0 "$build/tests/fuzz/make_seed_checkpoint" "$seeds"

# --- the bounded run -----------------------------------------------------------
# -rss_limit_mb also caps single allocations: a declared size that makes a
# reader allocate gigabytes is a finding, as is a parse that takes 10 s.
# Allowances for HDF5 1.10 itself (see tests/fuzz/fuzz_readers.cpp): it
# mallocs sizes read from damaged headers and mostly handles a NULL result
# (allocator_may_return_null, as glibc would return), and it leaks small
# blocks when an open fails (detect_leaks=0, also in ASAN_OPTIONS for the
# workers' exit check; a leak that grows still hits -rss_limit_mb). Fork mode
# keeps fuzzing past a crash, so a crash inside libhdf5 cannot hide a later
# one in dptrain; each finding is triaged below.
# New inputs collect in $build/corpus, so later runs start from them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0}
fuzzer="$build/tests/fuzz/fuzz_readers"
rss_limit_mb=2048
limits=(-rss_limit_mb=$rss_limit_mb -timeout=10 -detect_leaks=0)
rm -rf "$build/artifacts" "$build/known-hdf5"
mkdir -p "$build/artifacts" "$build/known-hdf5"
echo "fuzz: fuzz_readers for ${seconds}s ($(ls "$seeds" | wc -l) seeds, $(ls "$build/corpus" | wc -l) corpus files)"
start=$(date +%s)
"$fuzzer" "${limits[@]}" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
  -max_total_time="$seconds" -max_len=65536 -artifact_prefix="$build/artifacts/" \
  "$build/corpus" "$seeds" >"$build/fuzz.log" 2>&1 || true
rm -f "/tmp/dptrain-fuzz-"*.h5 2>/dev/null || true
grep -E '^#[0-9]+: cov|^INFO: (fuzzed|exiting)|^INFO: fuzzed for' "$build/fuzz.log" | tail -n 3 || true
echo "fuzz: ran $(($(date +%s) - start))s; findings: $(ls "$build/artifacts" | wc -l)"

# The first stack frame of a report that is neither sanitizer, libFuzzer nor
# libc machinery (frames of the fuzzer binary without a source line are the
# ASan interceptors and libFuzzer): where the fault is. Frames in libhdf5 there (dptrain frames
# only further down, as callers) are HDF5's own bugs on damaged input, which
# dptrain cannot prevent short of parsing HDF5 itself.
fault_frame() {
  sed -n '/ERROR: /,$p' "$1" | grep -E '^ +#[0-9]+ ' |
    grep -vE ' in (__interceptor_|__asan|__sanitizer|__lsan|fuzzer::|malloc|calloc|realloc|free|operator new|__mem|__str|__libc|_start)|/libc\.so|sysdeps/|fuzz_readers\+0x' |
    head -n 1
}

# Who holds the live heap of an out-of-memory report ("Live Heap
# Allocations": one block per allocation context, its bytes, then its
# stack): prints "DPTRAIN_MB HDF5_MB", or nothing when the report has no
# such section. A context is HDF5's when a libhdf5 frame comes before any
# frame of this project's sources, dptrain's when a frame of src/ or tests/
# comes first (std:: and libz frames decide nothing).
heap_owners() {
  awk '
    /^Live Heap Allocations/ { on = 1; next }
    on && /^[0-9]+ byte\(s\)/ { bytes = $1; owner = ""; next }
    on && /^ +#[0-9]+ / && owner == "" && bytes > 0 {
      if ($0 ~ /libhdf5/) owner = "hdf5"
      else if ($0 ~ /\/(src|tests)\/[^ ]*\.(cpp|hpp|cu):[0-9]/) owner = "dptrain"
      if (owner != "") { held[owner] += bytes; bytes = 0 }
    }
    END { if (on) printf "%d %d\n", held["dptrain"] / 1048576, held["hdf5"] / 1048576 }' "$1"
}

failed=0
for a in "$build"/artifacts/*; do
  [[ -e "$a" ]] || continue
  log="$a.log"
  # A finding that does not reproduce alone, or a timeout, says more about a
  # loaded machine than about the code: reported, kept, not failed on.
  if "$fuzzer" "${limits[@]}" "$a" >"$log" 2>&1; then
    echo "fuzz: warning: $(basename "$a") did not reproduce alone (kept in $build/artifacts)" >&2
    continue
  fi
  kind=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [A-Za-z-]+' "$log" || echo "unknown")
  if [[ "$kind" == *"libFuzzer: timeout"* ]]; then
    echo "fuzz: warning: $(basename "$a") takes over 10 s to parse (report in $log)" >&2
    continue
  fi
  # An out-of-memory report is judged by who holds the heap, not by its
  # first stack (the largest context). dptrain's share is bounded by design
  # (rows of at most 256 MiB: the harness's features and labels and the
  # reader's window of one row, 768 MiB), HDF5's is whatever sizes a
  # damaged header declares (a chunk of gigabytes, inflated by doubling
  # reallocs); the rest of the limit is memory freed into ASan's quarantine
  # or other libraries'. dptrain holding over half the limit is a finding;
  # less is not dptrain's doing.
  if [[ "$kind" == *"libFuzzer: out-of-memory"* ]]; then
    owners=$(heap_owners "$log")
    if [[ -n "$owners" ]] && ((${owners% *} <= rss_limit_mb / 2)); then
      echo "fuzz: known HDF5-internal: out-of-memory with dptrain holding ${owners% *} MB" \
        "(HDF5 ${owners#* } MB; $(basename "$a"))"
      mv "$a" "$log" "$build/known-hdf5/"
      continue
    fi
  fi
  frame=$(fault_frame "$log")
  # An out-of-memory report may have no stack: the RSS limit trips after the
  # allocation, outside it. Replayed with a malloc limit, libFuzzer reports
  # the allocation that crosses it, with its stack, and its caller decides
  # as for a crash. (libFuzzer's malloc hooks, which the limit needs, are
  # off under -detect_leaks=0: not among these flags.)
  if [[ "$kind" == *"libFuzzer: out-of-memory"* && -z "$frame" ]]; then
    ASAN_OPTIONS=detect_leaks=0 "$fuzzer" -rss_limit_mb=$rss_limit_mb -malloc_limit_mb=$rss_limit_mb -timeout=10 \
      "$a" >"$a.malloc.log" 2>&1 || true
    frame=$(fault_frame "$a.malloc.log")
    [[ -n "$frame" ]] && cat "$a.malloc.log" >>"$log"
    rm -f "$a.malloc.log"
  fi
  if [[ "$frame" == *libhdf5* ]]; then
    fn=$(sed -nE 's/.* in ([A-Za-z0-9_]+) .*/\1/p' <<<"$frame")
    echo "fuzz: known HDF5-internal: ${kind#ERROR: } in ${fn:-libhdf5} ($(basename "$a"))"
    mv "$a" "$log" "$build/known-hdf5/"
  else
    echo "fuzz: FINDING: ${kind#ERROR: } at${frame:- (no stack)}; report in $log" >&2
    failed=1
  fi
done
if ((failed)); then
  echo "fuzz: FAILED; replay with: $fuzzer ${limits[*]} ARTIFACT" >&2
  exit 1
fi
echo "fuzz: no findings in dptrain code in ${seconds}s"
