// Implements: the libFuzzer target over everything that parses an untrusted
// HDF5 file: Dataset (open, validate, read_rows), list_sets, read_checkpoint
// (full and model-only) and the inspect printer. A dptrain::Error is the
// expected answer to a bad file; a crash, an ASan report, an allocation over
// -rss_limit_mb or a run over -timeout is a finding. Built by tools/fuzz.sh.
//
// HDF5 opens files by name, so each input goes to one scratch file per
// process (libFuzzer's -fork/-jobs workers must not share it).
//
// Known HDF5 1.10.8 (Debian 12) faults on damaged files, below every check
// dptrain can make because they happen while HDF5 parses its own metadata
// (superblock, object headers, local heaps, B-trees) inside H5Fopen,
// H5Lexists or H5Oopen. tools/fuzz.sh triages them by the faulting frame and
// lists them as "known HDF5-internal" instead of failing:
//  - SEGV reading address 0 in H5F__accum_read (from H5HL_protect under
//    H5Lexists): a local heap whose size field is huge; the malloc fails and
//    the NULL is used. `dptrain inspect` on such a file dies with SIGSEGV.
//  - direct leaks of H5FL blocks when H5Fopen fails on a damaged root object
//    header (hence detect_leaks=0).
//  - heap-buffer-overflow READ in H5MM_strdup (from H5Aiterate2/H5Aexists):
//    an attribute message whose name is not terminated; and a wild memcpy
//    copying a damaged attribute message, on the same path.
//  - mallocs of sizes taken from damaged headers (terabytes); HDF5 checks
//    most of these for NULL (hence allocator_may_return_null=1).
//  - out-of-memory reports where no single allocation is over the limit:
//    HDF5's chunk buffers (a declared chunk of a gigabyte, inflated by
//    doubling reallocs) beside dptrain's bounded buffers for one row of at
//    most 256 MiB; tools/fuzz.sh fails only where dptrain holds over half
//    the limit.
// Checkpoints dptrain writes are in the checksummed 1.10 format, so damage
// to them is refused before parsing; data files from h5py are not.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "app/inspect.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/data/dataset.hpp"

namespace {

// validate() and inspect scan every stored row, so their time grows with
// the size a header declares. A mutated dimension of a chunked dataset with
// no chunks written reads back fill values for any N: slow by design, not a
// bug, so those scans run only when the declared set is small.
constexpr std::uint64_t kMaxScannedBytes = std::uint64_t(64) << 20;

const std::string &scratch_path() {
  static const std::string path =
      "/tmp/dptrain-fuzz-" + std::to_string(getpid()) + ".h5";
  return path;
}

bool write_input(const std::string &path, const std::uint8_t *data,
                 std::size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

std::uint64_t declared_bytes(const dptrain::SetInfo &info) {
  return info.rows *
         (info.feature_bytes_per_row() + info.label_bytes_per_row());
}

// Returns whether every set is small enough for inspect's full scans.
bool exercise_sets(const std::string &path) {
  std::vector<std::string> sets;
  try {
    sets = dptrain::list_sets(path);
  } catch (const dptrain::Error &) {
  }
  sets.push_back("train"); // what training opens, listed or not
  bool small = true;
  for (const auto &name : sets) {
    try {
      dptrain::Dataset ds(path, name);
      const dptrain::SetInfo &info = ds.info();
      // Dataset bounds a row to 256 MiB; read a few rows, or one large one.
      const std::uint64_t row_bytes =
          info.feature_bytes_per_row() + info.label_bytes_per_row();
      const std::uint64_t rows = row_bytes > (std::uint64_t(16) << 20)
                                     ? 1
                                     : std::min<std::uint64_t>(info.rows, 4);
      std::vector<std::uint8_t> features(rows * info.feature_bytes_per_row());
      std::vector<std::uint8_t> labels(rows * info.label_bytes_per_row());
      ds.read_rows(0, rows, features.data(), labels.data());
      // Dataset refuses sizes over 2^40 bytes, so this cannot overflow.
      if (declared_bytes(info) > kMaxScannedBytes) {
        small = false;
        continue;
      }
      ds.validate(10);
    } catch (const dptrain::Error &) {
    }
  }
  return small;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data,
                                      std::size_t size) {
  const std::string &path = scratch_path();
  if (!write_input(path, data, size))
    return 0;
  const bool small = exercise_sets(path);
  for (bool model_only : {false, true}) {
    try {
      dptrain::read_checkpoint(path, model_only);
    } catch (const dptrain::Error &) {
    }
  }
  if (small) {
    try {
      std::ostringstream out;
      dptrain::inspect_file(path, out);
    } catch (const dptrain::Error &) {
    }
  }
  return 0;
}
