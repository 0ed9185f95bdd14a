// Implements: writers of small docs/design.md section 3 data files for tests (unit
// and MPI), with deterministic contents that tests can recompute per row.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"

namespace dptrain::testing {

// Opens file read-write, creating it when missing, so several sets and odd
// extra objects can be added to one file by successive calls.
inline h5::File open_or_create(const std::string& file) {
  if (std::filesystem::exists(file)) return h5::open_read_write(file, ExitCode::kOther);
  return h5::create_file(file, ExitCode::kOther);
}

// One array at path (parents created). stored: the type in the file
// (H5T_IEEE_F32LE, H5T_STD_U8LE, H5T_STD_I64LE, H5T_IEEE_F64LE, ...);
// mem: the type of data (H5T_NATIVE_*). chunk_rows 0: contiguous.
inline void write_array(const std::string& file, const std::string& path, hid_t stored, hid_t mem,
                        const std::vector<hsize_t>& dims, const void* data,
                        hsize_t chunk_rows = 0, bool fletcher32 = false) {
  h5::File f = open_or_create(file);
  h5::CreateOptions opt;
  opt.chunk_rows = chunk_rows;
  opt.fletcher32 = fletcher32;
  h5::write_array(f.get(), path, stored, mem, dims, data, ExitCode::kOther, opt);
}

// A classification set: features float32 [N, shape...], labels int32 [N].
inline void write_set(const std::string& file, const std::string& set,
                      const std::vector<float>& features, const std::vector<hsize_t>& shape,
                      const std::vector<std::int32_t>& labels, hsize_t chunk_rows = 0) {
  write_array(file, "/" + set + "/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape,
              features.data(), chunk_rows);
  write_array(file, "/" + set + "/labels", H5T_STD_I32LE, H5T_NATIVE_INT32,
              {static_cast<hsize_t>(labels.size())}, labels.data(), chunk_rows);
}

// A regression set: features float32 [N, shape...], targets float32 [N, k].
inline void write_set(const std::string& file, const std::string& set,
                      const std::vector<float>& features, const std::vector<hsize_t>& shape,
                      const std::vector<float>& targets, hsize_t k, hsize_t chunk_rows = 0) {
  write_array(file, "/" + set + "/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape,
              features.data(), chunk_rows);
  write_array(file, "/" + set + "/labels", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
              {static_cast<hsize_t>(targets.size() / k), k}, targets.data(), chunk_rows);
}

// --- deterministic fixture sets ---------------------------------------------
// Element j of row i; distinct per (i, j) so a misplaced row shows.
inline float fixture_value(std::uint64_t i, std::uint64_t j) {
  return static_cast<float>(i) + static_cast<float>(j) * 0.001f;
}
inline std::uint8_t fixture_byte(std::uint64_t i, std::uint64_t j) {
  return static_cast<std::uint8_t>((i * 31 + j * 7) & 255);
}
inline std::int32_t fixture_label(std::uint64_t i, std::int32_t classes) {
  return static_cast<std::int32_t>((i * 7 + 3) % static_cast<std::uint64_t>(classes));
}
inline float fixture_target(std::uint64_t i, std::uint64_t k) {
  return static_cast<float>(i) * 0.5f - static_cast<float>(k);
}

struct FixtureSpec {
  std::string set = "train";
  std::uint64_t rows = 100;
  std::vector<hsize_t> shape = {3, 4};  // trailing feature dims
  bool uint8 = false;                   // uint8 features (fixture_byte) instead of float32
  std::int32_t classes = 10;            // class labels fixture_label(i, classes)
  bool int64_labels = false;
  std::uint64_t targets = 0;            // > 0: float32 targets [N, targets] instead of labels
  hsize_t chunk_rows = 0;               // 0: contiguous
  bool fletcher32 = false;              // checksummed feature chunks (needs chunk_rows)
};

inline std::uint64_t fixture_dim(const FixtureSpec& s) {
  std::uint64_t d = 1;
  for (hsize_t x : s.shape) d *= x;
  return d;
}

// Row i as a Batch holds it (uint8 scaled by 1/255).
inline std::vector<float> fixture_row(const FixtureSpec& s, std::uint64_t i) {
  std::vector<float> row(fixture_dim(s));
  for (std::uint64_t j = 0; j < row.size(); ++j)
    row[j] = s.uint8 ? static_cast<float>(fixture_byte(i, j)) * (1.0f / 255.0f)
                     : fixture_value(i, j);
  return row;
}

// Writes /<set>/features and /<set>/labels of the spec into file (appends).
inline void write_fixture(const std::string& file, const FixtureSpec& s) {
  const std::uint64_t d = fixture_dim(s), n = s.rows;
  std::vector<hsize_t> dims{n};
  dims.insert(dims.end(), s.shape.begin(), s.shape.end());
  const std::string g = "/" + s.set;
  if (s.uint8) {
    std::vector<std::uint8_t> f(n * d);
    for (std::uint64_t i = 0; i < n; ++i)
      for (std::uint64_t j = 0; j < d; ++j) f[i * d + j] = fixture_byte(i, j);
    write_array(file, g + "/features", H5T_STD_U8LE, H5T_NATIVE_UINT8, dims, f.data(),
                s.chunk_rows, s.fletcher32);
  } else {
    std::vector<float> f(n * d);
    for (std::uint64_t i = 0; i < n; ++i)
      for (std::uint64_t j = 0; j < d; ++j) f[i * d + j] = fixture_value(i, j);
    write_array(file, g + "/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, f.data(),
                s.chunk_rows, s.fletcher32);
  }
  if (s.targets > 0) {
    std::vector<float> t(n * s.targets);
    for (std::uint64_t i = 0; i < n; ++i)
      for (std::uint64_t k = 0; k < s.targets; ++k) t[i * s.targets + k] = fixture_target(i, k);
    write_array(file, g + "/labels", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, s.targets}, t.data(),
                s.chunk_rows);
  } else if (s.int64_labels) {
    std::vector<std::int64_t> l(n);
    for (std::uint64_t i = 0; i < n; ++i) l[i] = fixture_label(i, s.classes);
    write_array(file, g + "/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {n}, l.data(), s.chunk_rows);
  } else {
    std::vector<std::int32_t> l(n);
    for (std::uint64_t i = 0; i < n; ++i) l[i] = fixture_label(i, s.classes);
    write_array(file, g + "/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {n}, l.data(), s.chunk_rows);
  }
}

}  // namespace dptrain::testing
