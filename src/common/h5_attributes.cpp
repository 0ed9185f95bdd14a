// Implements: the attribute and string helpers of h5.hpp (scalar numbers
// and UTF-8 strings that h5py reads back as int and str).
#include <functional>

#include "dptrain/common/h5.hpp"

namespace dptrain::h5 {
namespace {

#define DPT_H5_FAIL(code, msg) ::dptrain::throw_error((code), (msg), __FILE__, __LINE__)
void require_scalar(hid_t space, ExitCode code, const std::string& what) {
  if (H5Sget_simple_extent_npoints(space) != 1) DPT_H5_FAIL(code, what + ": not a single value");
}

// Reads one string from an attribute or a dataset; `read` does the transfer.
std::string read_string_value(hid_t stored_type, hid_t space, ExitCode code,
                              const std::string& what,
                              const std::function<herr_t(hid_t, void*)>& read) {
  if (H5Tget_class(stored_type) != H5T_STRING)
    DPT_H5_FAIL(code, what + ": is " + type_name(stored_type) + ", not a string");
  require_scalar(space, code, what);
  DataType mem(check(H5Tcopy(H5T_C_S1), code, what));
  H5Tset_cset(mem.get(), H5Tget_cset(stored_type));
  if (H5Tis_variable_str(stored_type) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* p = nullptr;
    check_status(read(mem.get(), &p), code, what + ": read failed");
    std::string s = p ? p : "";
    if (p) H5free_memory(p);
    return s;
  }
  std::size_t size = H5Tget_size(stored_type);
  H5Tset_size(mem.get(), size + 1);  // room for the terminator HDF5 adds
  H5Tset_strpad(mem.get(), H5T_STR_NULLTERM);
  std::string s(size + 1, '\0');
  check_status(read(mem.get(), s.data()), code, what + ": read failed");
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

template <typename T>
T read_attr_number(hid_t obj, const std::string& name, hid_t mem_type, ExitCode code) {
  quiet();
  const std::string what = describe(obj) + ": attribute '" + name + "'";
  if (!has_attr(obj, name)) DPT_H5_FAIL(code, what + ": missing");
  Attribute a(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), code, what));
  DataSpace space(check(H5Aget_space(a.get()), code, what));
  require_scalar(space.get(), code, what);
  DataType t(check(H5Aget_type(a.get()), code, what));
  H5T_class_t c = H5Tget_class(t.get());
  if (c != H5T_INTEGER && c != H5T_FLOAT)
    DPT_H5_FAIL(code, what + ": is " + type_name(t.get()) + ", not a number");
  T v{};
  check_status(H5Aread(a.get(), mem_type, &v), code, what + ": read failed");
  return v;
}

// A scalar attribute, or (count > 0) a one-dimensional one of count values.
void write_attr_raw(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                    const void* value, ExitCode code, hsize_t count = 0) {
  quiet();
  const std::string what = describe(obj) + ": attribute '" + name + "'";
  if (has_attr(obj, name)) check_status(H5Adelete(obj, name.c_str()), code, what + ": replace");
  DataSpace space(check(count ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_SCALAR), code,
                        what));
  Attribute a(check(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    code, what + ": create"));
  check_status(H5Awrite(a.get(), mem_type, value), code, what + ": write");
}

DataType utf8_string_type(ExitCode code) {
  DataType t(check(H5Tcopy(H5T_C_S1), code, "string type"));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

bool has_attr(hid_t obj, const std::string& name) {
  quiet();
  htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

void write_attr(hid_t obj, const std::string& name, std::int64_t value, ExitCode code) {
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, code);
}
void write_attr(hid_t obj, const std::string& name, std::uint64_t value, ExitCode code) {
  write_attr_raw(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value, code);
}
void write_attr(hid_t obj, const std::string& name, double value, ExitCode code) {
  write_attr_raw(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, code);
}
void write_attr(hid_t obj, const std::string& name, const std::string& value, ExitCode code) {
  DataType t = utf8_string_type(code);
  const char* p = value.c_str();
  write_attr_raw(obj, name, t.get(), t.get(), &p, code);
}

void write_attr_fixed(hid_t obj, const std::string& name, const std::string& value,
                      ExitCode code) {
  DataType t(check(H5Tcopy(H5T_C_S1), code, "string type"));
  // NULLPAD stores exactly the bytes, no terminator; HDF5 needs size >= 1.
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  H5Tset_size(t.get(), padded.size());
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  write_attr_raw(obj, name, t.get(), t.get(), padded.data(), code);
}

std::int64_t read_attr_int64(hid_t obj, const std::string& name, ExitCode code) {
  return read_attr_number<std::int64_t>(obj, name, H5T_NATIVE_INT64, code);
}
std::uint64_t read_attr_uint64(hid_t obj, const std::string& name, ExitCode code) {
  return read_attr_number<std::uint64_t>(obj, name, H5T_NATIVE_UINT64, code);
}
double read_attr_double(hid_t obj, const std::string& name, ExitCode code) {
  return read_attr_number<double>(obj, name, H5T_NATIVE_DOUBLE, code);
}

void write_attr_int64s(hid_t obj, const std::string& name, const std::vector<std::int64_t>& values,
                       ExitCode code) {
  DPT_REQUIRE(!values.empty(), code, describe(obj) + ": attribute '" + name + "': no values");
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data(), code, values.size());
}

std::vector<std::int64_t> read_attr_int64s(hid_t obj, const std::string& name, std::size_t max_len,
                                           ExitCode code) {
  quiet();
  const std::string what = describe(obj) + ": attribute '" + name + "'";
  if (!has_attr(obj, name)) DPT_H5_FAIL(code, what + ": missing");
  Attribute a(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), code, what));
  DataSpace space(check(H5Aget_space(a.get()), code, what));
  DataType t(check(H5Aget_type(a.get()), code, what));
  if (H5Tget_class(t.get()) != H5T_INTEGER)
    DPT_H5_FAIL(code, what + ": is " + type_name(t.get()) + ", not integers");
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (H5Sget_simple_extent_ndims(space.get()) > 1 || n < 0 || std::size_t(n) > max_len)
    DPT_H5_FAIL(code, what + ": need a list of at most " + std::to_string(max_len) + " integers");
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  if (n > 0) check_status(H5Aread(a.get(), H5T_NATIVE_INT64, v.data()), code, what + ": read failed");
  return v;
}

std::string read_attr_string(hid_t obj, const std::string& name, ExitCode code) {
  quiet();
  const std::string what = describe(obj) + ": attribute '" + name + "'";
  if (!has_attr(obj, name)) DPT_H5_FAIL(code, what + ": missing");
  Attribute a(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), code, what));
  DataType t(check(H5Aget_type(a.get()), code, what));
  DataSpace space(check(H5Aget_space(a.get()), code, what));
  return read_string_value(t.get(), space.get(), code, what,
                           [&](hid_t mem, void* buf) { return H5Aread(a.get(), mem, buf); });
}

void write_string(hid_t loc, const std::string& path, const std::string& value, ExitCode code) {
  DataType t = utf8_string_type(code);
  DataSet d = create_dataset(loc, path, t.get(), {}, code);
  const char* p = value.c_str();
  write_all(d.get(), t.get(), &p, code);
}

std::string read_string(hid_t loc, const std::string& path, ExitCode code) {
  DataSet d = open_dataset(loc, path, code);
  const std::string what = describe(d.get());
  DataType t = type_of(d.get());
  DataSpace space(check(H5Dget_space(d.get()), code, what));
  return read_string_value(t.get(), space.get(), code, what, [&](hid_t mem, void* buf) {
    return H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  });
}

}  // namespace dptrain::h5
