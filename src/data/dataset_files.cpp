// Implements: file lists, virtual-dataset source checks and the pool of
// open parts (see dataset_files.hpp).
#include "dptrain/data/dataset_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

namespace fs = std::filesystem;

#define DPT_FILES_FAIL(msg) ::dptrain::throw_error(ExitCode::kData, (msg), __FILE__, __LINE__)

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A name relative to the folder of `base` (absolute names stay).
std::string beside(const std::string& base, const std::string& name) {
  const fs::path p(name);
  if (p.is_absolute()) return name;
  const fs::path dir = fs::path(base).parent_path();
  return (dir.empty() ? p : dir / p).lexically_normal().string();
}

}  // namespace

bool is_file_list(const std::string& path) { return fs::path(path).extension() == ".txt"; }

std::vector<std::string> read_file_list(const std::string& list) {
  std::error_code ec;
  if (!fs::exists(list, ec)) DPT_FILES_FAIL(list + ": no such file (the list of data files)");
  std::ifstream in(list);
  if (!in) DPT_FILES_FAIL(list + ": cannot read the list of data files");
  std::vector<std::string> files;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    files.push_back(beside(list, line));
  }
  if (in.bad()) DPT_FILES_FAIL(list + ": cannot read the list of data files");
  if (files.empty())
    DPT_FILES_FAIL(list + ": lists no data files (one HDF5 file a line expected)");
  return files;
}

void check_virtual_sources(hid_t dataset, const std::string& file, const std::string& name) {
  h5::PropList dcpl(h5::check(H5Dget_create_plist(dataset), ExitCode::kData, name));
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL) return;
  size_t count = 0;
  h5::check_status(H5Pget_virtual_count(dcpl.get(), &count), ExitCode::kData,
                   name + ": cannot read the virtual dataset's mappings");
  if (count == 0) DPT_FILES_FAIL(name + ": a virtual dataset that maps no source");
  std::string source;
  for (size_t i = 0; i < count; ++i) {
    const ssize_t len = H5Pget_virtual_filename(dcpl.get(), i, nullptr, 0);
    if (len < 0) DPT_FILES_FAIL(name + ": cannot read source " + std::to_string(i) + " of the virtual dataset");
    source.assign(static_cast<std::size_t>(len) + 1, '\0');
    H5Pget_virtual_filename(dcpl.get(), i, source.data(), source.size());
    source.resize(static_cast<std::size_t>(len));
    if (source == ".") continue;  // the virtual dataset's own file
    const std::string path = beside(file, source);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      DPT_FILES_FAIL(name + ": source file " + path + " of the virtual dataset (mapping " +
                     std::to_string(i) + ") does not exist; HDF5 would read its rows as zeros");
  }
}

std::size_t PartPool::part_of(std::uint64_t row) const {
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), row,
                                   [](std::uint64_t r, const SetPart& p) { return r < p.first; });
  return static_cast<std::size_t>(it - parts_.begin()) - 1;
}

void PartPool::close_one_if_full() {
  while (open_ >= kMaxOpen) {
    SetPart* oldest = nullptr;
    for (SetPart& p : parts_)
      if (p.features && (!oldest || p.last_use < oldest->last_use)) oldest = &p;
    oldest->features.reset();
    oldest->labels.reset();
    oldest->handle.reset();
    --open_;
  }
}

}  // namespace dptrain
