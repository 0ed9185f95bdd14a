// Implements: a tiny RAII layer over the HDF5 C API for the data and
// checkpoint code: owning handles, open/create helpers, attributes, and one
// place that turns HDF5 failures into dptrain::Error with HDF5's own reason.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/common/error.hpp"

namespace dptrain::h5 {

// Owns one HDF5 id and closes it with Close. Non-copyable; a moved-from
// handle is empty, so an id is closed exactly once. Close failures are
// ignored: destructors never throw.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() noexcept {
    if (id_ >= 0) Close(std::exchange(id_, H5I_INVALID_HID));
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using DataSet = Handle<H5Dclose>;
using DataSpace = Handle<H5Sclose>;
using DataType = Handle<H5Tclose>;  // only for types we own, never H5T_NATIVE_*
using PropList = Handle<H5Pclose>;
using Attribute = Handle<H5Aclose>;

// Turns off HDF5's printing of its error stack for the calling thread (the
// stack is per thread in the thread-safe build Debian ships). Every helper
// below calls it; call it yourself before raw H5* calls on a new thread.
void quiet();

// The most specific message on HDF5's error stack of this thread (e.g.
// "truncated file: eof = 800, ..."), then clears the stack. "" when empty.
std::string last_error();

// Throws Error(code, what + ": " + last_error()) when id / status < 0;
// otherwise returns it. `what` should already name the file and object.
hid_t check(hid_t id, ExitCode code, const std::string& what);
herr_t check_status(herr_t status, ExitCode code, const std::string& what);

// "file.h5: /train/labels" for any open object (file name as it was opened).
std::string describe(hid_t obj);

// --- files ---------------------------------------------------------------
// Read-only open with distinct messages for a missing file, a file that is
// not HDF5, and one HDF5 cannot open (truncated, corrupt).
File open_read(const std::string& path, ExitCode code);
File open_read_write(const std::string& path, ExitCode code);
File create_file(const std::string& path, ExitCode code);  // truncates
// Like create_file, in the HDF5 1.10+ file format: its superblock, object
// headers and chunk indexes carry checksums, so damaged metadata fails to
// open or read instead of being parsed (HDF5 1.10 can crash on some damaged
// unchecksummed metadata). Readable by HDF5 >= 1.10 and h5py.
File create_file_checksummed(const std::string& path, ExitCode code);
void flush(hid_t file, ExitCode code);

// --- groups, datasets, links ---------------------------------------------
// Whether every link along `path` (relative to loc, or absolute) exists.
bool exists(hid_t loc, const std::string& path);
bool is_group(hid_t loc, const std::string& path);
bool is_dataset(hid_t loc, const std::string& path);
// Names of the direct children of loc, in name order.
std::vector<std::string> children(hid_t loc);

Group open_group(hid_t loc, const std::string& path, ExitCode code);
// Creates the group and any missing parents.
Group create_group(hid_t loc, const std::string& path, ExitCode code);
DataSet open_dataset(hid_t loc, const std::string& path, ExitCode code,
                     hid_t access = H5P_DEFAULT);

struct CreateOptions {
  hsize_t chunk_rows = 0;  // 0: contiguous; else chunks of this many rows (full trailing dims)
  bool fletcher32 = false;  // checksum each chunk (needs chunk_rows > 0)
};
// Creates path (parents too) with stored type file_type and shape dims.
DataSet create_dataset(hid_t loc, const std::string& path, hid_t file_type,
                       const std::vector<hsize_t>& dims, ExitCode code,
                       const CreateOptions& opt = {});
// Whole-dataset transfer; data holds the full dataset in mem_type.
void write_all(hid_t dataset, hid_t mem_type, const void* data, ExitCode code);
void read_all(hid_t dataset, hid_t mem_type, void* data, ExitCode code);
// Rows [begin, begin + count) along the first dimension, all trailing dims.
void read_rows(hid_t dataset, hid_t mem_type, hsize_t begin, hsize_t count, void* data,
               ExitCode code);
void write_rows(hid_t dataset, hid_t mem_type, hsize_t begin, hsize_t count,
                const void* data, ExitCode code);
// create_dataset + write_all in one call.
void write_array(hid_t loc, const std::string& path, hid_t file_type, hid_t mem_type,
                 const std::vector<hsize_t>& dims, const void* data, ExitCode code,
                 const CreateOptions& opt = {});

// --- shapes and types ----------------------------------------------------
std::vector<hsize_t> shape(hid_t dataset);
// Chunk dims of a chunked dataset; empty when contiguous or compact.
std::vector<hsize_t> chunk_shape(hid_t dataset);
DataType type_of(hid_t dataset);
// Stored type in numpy words: "float32", "uint8", "int64", "string", ...
std::string type_name(hid_t type);
std::string shape_string(const std::vector<hsize_t>& dims);  // "[32, 28, 28]"

// --- attributes ----------------------------------------------------------
bool has_attr(hid_t obj, const std::string& name);
// Replace an existing attribute of the same name.
void write_attr(hid_t obj, const std::string& name, std::int64_t value, ExitCode code);
void write_attr(hid_t obj, const std::string& name, std::uint64_t value, ExitCode code);
void write_attr(hid_t obj, const std::string& name, double value, ExitCode code);
// Variable-length UTF-8 string, which h5py reads back as str.
void write_attr(hid_t obj, const std::string& name, const std::string& value, ExitCode code);
// Keeps string literals from picking the integer overloads.
inline void write_attr(hid_t obj, const std::string& name, const char* value, ExitCode code) {
  write_attr(obj, name, std::string(value), code);
}
// Fixed-length UTF-8 string, stored inside the object header (covered by its
// checksum in create_file_checksummed files) instead of the global heap that
// variable-length strings use, which has no checksum. h5py reads it as bytes.
void write_attr_fixed(hid_t obj, const std::string& name, const std::string& value, ExitCode code);
// Readers convert any stored integer/float type; a missing attribute or an
// impossible conversion throws Error(code) naming object and attribute.
std::int64_t read_attr_int64(hid_t obj, const std::string& name, ExitCode code);
// A one-dimensional int64 attribute (a shape), and reading one of at most
// max_len integers back.
void write_attr_int64s(hid_t obj, const std::string& name, const std::vector<std::int64_t>& values,
                       ExitCode code);
std::vector<std::int64_t> read_attr_int64s(hid_t obj, const std::string& name, std::size_t max_len,
                                           ExitCode code);
std::uint64_t read_attr_uint64(hid_t obj, const std::string& name, ExitCode code);
double read_attr_double(hid_t obj, const std::string& name, ExitCode code);
// Fixed- or variable-length strings (h5py writes both).
std::string read_attr_string(hid_t obj, const std::string& name, ExitCode code);

// A scalar string dataset (e.g. a config text), readable by h5py.
void write_string(hid_t loc, const std::string& path, const std::string& value, ExitCode code);
std::string read_string(hid_t loc, const std::string& path, ExitCode code);

}  // namespace dptrain::h5
