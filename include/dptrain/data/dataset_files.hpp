// Implements: the files behind one set (docs/design.md section 3): a
// `.txt` list of HDF5 files whose sets are concatenated in the listed order,
// the source files an HDF5 virtual dataset maps (each must exist: HDF5
// reads a missing one as fill values, silently), and a bounded pool of
// open files, so a set of thousands of files keeps a few handles open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

#include "dptrain/common/h5.hpp"

namespace dptrain {

// Whether `--data` names a list of HDF5 files (a `.txt` file).
bool is_file_list(const std::string& path);

// The files a list names, in order: one path a line, relative paths taken
// from the list's own folder; blank lines and lines starting with '#' are
// skipped. Throws Error(kData) naming the list when it cannot be read or
// names no file.
std::vector<std::string> read_file_list(const std::string& list);

// For a virtual dataset: throws Error(kData) naming `name` and the source
// when a file it maps does not exist (relative names resolve from the
// folder of `file`, as HDF5 resolves them). Nothing for other layouts.
void check_virtual_sources(hid_t dataset, const std::string& file, const std::string& name);

// One file's share of a set: rows [first, first + rows) of the whole; its
// handles are open while the pool holds it.
struct SetPart {
  std::string file;
  std::uint64_t first = 0, rows = 0;
  h5::File handle;
  h5::DataSet features, labels;
  std::string features_name, labels_name;  // "file: /set/features" for messages
  std::uint64_t last_use = 0;
};

// At most `max_open` parts have open handles; use() reopens a closed part
// through `open` and closes the least recently used one first.
class PartPool {
 public:
  static constexpr std::size_t kMaxOpen = 8;
  std::vector<SetPart>& parts() { return parts_; }
  const std::vector<SetPart>& parts() const { return parts_; }
  // The part holding row `row` of the whole set.
  std::size_t part_of(std::uint64_t row) const;
  template <typename Open>
  SetPart& use(std::size_t i, Open&& open) {
    SetPart& p = parts_[i];
    if (!p.features) {
      close_one_if_full();
      open(p);
      ++open_;
    }
    p.last_use = ++clock_;
    return p;
  }
  std::size_t open_count() const { return open_; }

 private:
  // Closes the least recently used parts until one more may open.
  void close_one_if_full();

  std::vector<SetPart> parts_;
  std::uint64_t clock_ = 0;
  std::size_t open_ = 0;
};

}  // namespace dptrain
