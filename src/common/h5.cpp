// Implements: the HDF5 helpers of h5.hpp but attributes (h5_attributes.cpp).
// Errors carry HDF5's innermost reason instead of the printed stack we silence.
#include "dptrain/common/h5.hpp"

#include <algorithm>
#include <filesystem>

namespace dptrain::h5 {
namespace {

using Object = Handle<H5Oclose>;

#define DPT_H5_FAIL(code, msg) ::dptrain::throw_error((code), (msg), __FILE__, __LINE__)

std::string file_name(hid_t obj) {
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<std::size_t>(n), '\0');
  H5Fget_name(obj, s.data(), s.size() + 1);
  return s;
}

std::string object_path(hid_t obj) {
  ssize_t n = H5Iget_name(obj, nullptr, 0);
  if (n <= 0) return "/";
  std::string s(static_cast<std::size_t>(n), '\0');
  H5Iget_name(obj, s.data(), s.size() + 1);
  return s;
}

// "file.h5: /abs/path" for `path` relative to loc (or absolute).
std::string name_of(hid_t loc, const std::string& path) {
  std::string abs = path;
  if (path.empty() || path[0] != '/') {
    std::string base = object_path(loc);
    abs = (base == "/" ? "/" : base + "/") + path;
  }
  return file_name(loc) + ": " + abs;
}

hid_t file_access_list() {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
  // Cluster file systems often lack flock; a read must not fail for that.
  if (fapl >= 0) H5Pset_file_locking(fapl, true, true);
#endif
  return fapl;
}

}  // namespace

void quiet() {
  thread_local bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

std::string last_error() {
  std::string msg;
  auto innermost = [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
    if (n == 0 && err && err->desc) *static_cast<std::string*>(out) = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg;
}

hid_t check(hid_t id, ExitCode code, const std::string& what) {
  if (id < 0) {
    std::string why = last_error();
    DPT_H5_FAIL(code, why.empty() ? what : what + ": " + why);
  }
  return id;
}

herr_t check_status(herr_t status, ExitCode code, const std::string& what) {
  if (status < 0) {
    std::string why = last_error();
    DPT_H5_FAIL(code, why.empty() ? what : what + ": " + why);
  }
  return status;
}

std::string describe(hid_t obj) { return file_name(obj) + ": " + object_path(obj); }

File open_read(const std::string& path, ExitCode code) {
  quiet();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) DPT_H5_FAIL(code, path + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) DPT_H5_FAIL(code, path + ": not a regular file");
#if H5_VERSION_GE(1, 12, 0)
  htri_t is_h5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  htri_t is_h5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_h5 == 0) DPT_H5_FAIL(code, path + ": not an HDF5 file");
  PropList fapl(file_access_list());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  return File(check(f, code, path + ": cannot open HDF5 file"));
}

File open_read_write(const std::string& path, ExitCode code) {
  quiet();
  PropList fapl(file_access_list());
  return File(check(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), code,
                    path + ": cannot open HDF5 file for writing"));
}

File create_file(const std::string& path, ExitCode code) {
  quiet();
  PropList fapl(file_access_list());
  return File(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), code,
                    path + ": cannot create HDF5 file"));
}

File create_file_checksummed(const std::string& path, ExitCode code) {
  quiet();
  PropList fapl(file_access_list());
  // 1.10 is the first format whose chunk indexes (not only object headers)
  // are checksummed; with an 1.8 low bound chunked data keeps v1 B-trees.
  check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST), code,
               path + ": cannot select the checksummed file format");
  return File(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), code,
                    path + ": cannot create HDF5 file"));
}

void flush(hid_t file, ExitCode code) {
  quiet();
  check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), code, file_name(file) + ": flush failed");
}

bool exists(hid_t loc, const std::string& path) {
  quiet();
  if (path.empty()) return false;
  std::string prefix;
  std::size_t i = 0;
  if (path[0] == '/') {
    prefix = "/";
    i = 1;
  }
  while (i < path.size()) {
    std::size_t slash = path.find('/', i);
    std::string part = path.substr(i, slash == std::string::npos ? std::string::npos : slash - i);
    if (!part.empty()) {
      prefix += (prefix.empty() || prefix.back() == '/' ? "" : "/") + part;
      if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (slash == std::string::npos) break;
    i = slash + 1;
  }
  return true;
}

static H5I_type_t object_type(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) return H5I_BADID;
  Object o(H5Oopen(loc, path.c_str(), H5P_DEFAULT));
  if (!o) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  return H5Iget_type(o.get());
}

bool is_group(hid_t loc, const std::string& path) { return object_type(loc, path) == H5I_GROUP; }
bool is_dataset(hid_t loc, const std::string& path) {
  return object_type(loc, path) == H5I_DATASET;
}

std::vector<std::string> children(hid_t loc) {
  quiet();
  std::vector<std::string> out;
  H5G_info_t info;
  if (H5Gget_info(loc, &info) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return out;
  }
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0,
                                   H5P_DEFAULT);
    if (n < 0) continue;
    std::string s(static_cast<std::size_t>(n), '\0');
    H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1,
                       H5P_DEFAULT);
    out.push_back(std::move(s));
  }
  return out;
}

Group open_group(hid_t loc, const std::string& path, ExitCode code) {
  quiet();
  if (!is_group(loc, path)) DPT_H5_FAIL(code, name_of(loc, path) + ": missing (no such group)");
  return Group(check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), code, name_of(loc, path)));
}

Group create_group(hid_t loc, const std::string& path, ExitCode code) {
  quiet();
  PropList lcpl(check(H5Pcreate(H5P_LINK_CREATE), code, "link property list"));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return Group(check(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), code,
                     name_of(loc, path) + ": cannot create group"));
}

DataSet open_dataset(hid_t loc, const std::string& path, ExitCode code, hid_t access) {
  quiet();
  if (!exists(loc, path)) DPT_H5_FAIL(code, name_of(loc, path) + ": missing");
  if (!is_dataset(loc, path)) DPT_H5_FAIL(code, name_of(loc, path) + ": is not a dataset");
  return DataSet(check(H5Dopen2(loc, path.c_str(), access), code, name_of(loc, path)));
}

DataSet create_dataset(hid_t loc, const std::string& path, hid_t file_type,
                       const std::vector<hsize_t>& dims, ExitCode code, const CreateOptions& opt) {
  quiet();
  const std::string what = name_of(loc, path) + ": cannot create dataset";
  DataSpace space(check(dims.empty() ? H5Screate(H5S_SCALAR)
                                     : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                        code, what));
  PropList dcpl(check(H5Pcreate(H5P_DATASET_CREATE), code, what));
  bool empty = dims.empty();
  for (hsize_t d : dims) empty = empty || d == 0;
  if (opt.chunk_rows > 0 && !empty) {  // HDF5 refuses chunks on zero-size dims
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min(opt.chunk_rows, dims[0]);
    check_status(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()), code, what);
    if (opt.fletcher32) check_status(H5Pset_fletcher32(dcpl.get()), code, what);
  }
  PropList lcpl(check(H5Pcreate(H5P_LINK_CREATE), code, what));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return DataSet(check(H5Dcreate2(loc, path.c_str(), file_type, space.get(), lcpl.get(),
                                  dcpl.get(), H5P_DEFAULT),
                       code, what));
}

void write_all(hid_t dataset, hid_t mem_type, const void* data, ExitCode code) {
  quiet();
  check_status(H5Dwrite(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), code,
               describe(dataset) + ": write failed");
}

void read_all(hid_t dataset, hid_t mem_type, void* data, ExitCode code) {
  quiet();
  check_status(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), code,
               describe(dataset) + ": read failed");
}

// Selects rows [begin, begin + count) in the file space and a memory space
// of the selection's own shape: HDF5 then copies contiguous runs, where a
// flat memory space of the same size makes it map element by element (about
// 60x slower for uint8 image rows).
static std::pair<DataSpace, DataSpace> row_spaces(hid_t dataset, hsize_t begin, hsize_t count,
                                                  ExitCode code, const std::string& what) {
  DataSpace file_space(check(H5Dget_space(dataset), code, what));
  int rank = H5Sget_simple_extent_ndims(file_space.get());
  if (rank < 1) DPT_H5_FAIL(code, what + ": dataset has no rows");
  std::vector<hsize_t> dims(rank), start(rank, 0);
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
  if (begin + count > dims[0] || begin + count < begin)
    DPT_H5_FAIL(code, what + ": rows past the end (" + std::to_string(dims[0]) + " rows)");
  start[0] = begin;
  std::vector<hsize_t> cnt = dims;
  cnt[0] = count;
  check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                   cnt.data(), nullptr),
               code, what);
  DataSpace mem_space(check(H5Screate_simple(rank, cnt.data(), nullptr), code, what));
  return {std::move(file_space), std::move(mem_space)};
}

void read_rows(hid_t dataset, hid_t mem_type, hsize_t begin, hsize_t count, void* data,
               ExitCode code) {
  if (count == 0) return;
  quiet();
  const std::string what = describe(dataset) + ": read of rows [" + std::to_string(begin) + ", " +
                           std::to_string(begin + count) + ") failed";
  auto [file_space, mem_space] = row_spaces(dataset, begin, count, code, what);
  check_status(H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               code, what);
}

void write_rows(hid_t dataset, hid_t mem_type, hsize_t begin, hsize_t count, const void* data,
                ExitCode code) {
  if (count == 0) return;
  quiet();
  const std::string what = describe(dataset) + ": write of rows [" + std::to_string(begin) +
                           ", " + std::to_string(begin + count) + ") failed";
  auto [file_space, mem_space] = row_spaces(dataset, begin, count, code, what);
  check_status(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               code, what);
}

void write_array(hid_t loc, const std::string& path, hid_t file_type, hid_t mem_type,
                 const std::vector<hsize_t>& dims, const void* data, ExitCode code,
                 const CreateOptions& opt) {
  DataSet d = create_dataset(loc, path, file_type, dims, code, opt);
  bool empty = false;
  for (hsize_t x : dims) empty = empty || x == 0;
  if (!empty) write_all(d.get(), mem_type, data, code);
}

std::vector<hsize_t> shape(hid_t dataset) {
  quiet();
  DataSpace space(check(H5Dget_space(dataset), ExitCode::kOther, describe(dataset)));
  int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::vector<hsize_t> chunk_shape(hid_t dataset) {
  quiet();
  PropList dcpl(check(H5Dget_create_plist(dataset), ExitCode::kOther, describe(dataset)));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return {};
  int rank = H5Pget_chunk(dcpl.get(), 0, nullptr);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Pget_chunk(dcpl.get(), rank, dims.data());
  return dims;
}

DataType type_of(hid_t dataset) {
  quiet();
  return DataType(check(H5Dget_type(dataset), ExitCode::kOther, describe(dataset)));
}

std::string type_name(hid_t type) {
  std::string bits = std::to_string(8 * H5Tget_size(type));
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT: return "float" + bits;
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "vlen";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "unknown";
  }
}

std::string shape_string(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace dptrain::h5
