// Implements: ckpt::FileReader (checkpoint_file_reader.hpp), the file-level
// checks every checkpoint read goes through.
#include "checkpoint/checkpoint_file_reader.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dptrain::ckpt {

void FileReader::probe(const std::string& name) const {
  h5::quiet();
  h5::Handle<H5Oclose> o(H5Oopen(file, name.c_str(), H5P_DEFAULT));
  auto attr_cb = [](hid_t, const char*, const H5A_info_t*, void*) -> herr_t { return 0; };
  auto link_cb = [](hid_t, const char*, const H5L_info_t*, void*) -> herr_t { return 0; };
  bool ok =
      o && H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, attr_cb, nullptr) >= 0;
  if (ok && H5Iget_type(o.get()) == H5I_GROUP)
    ok = H5Literate(o.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, link_cb, nullptr) >= 0;
  if (!ok) bad(name + ": damaged file metadata (" + h5::last_error() + ")");
}

std::string FileReader::attr_string(hid_t obj, const std::string& where, const char* name) const {
  if (h5::has_attr(obj, name)) {
    h5::Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
    if (a && H5Aget_storage_size(a.get()) > kMaxAttrBytes)
      bad(where + ": attribute '" + name + "' is larger than 16 MiB");
  }
  return h5::read_attr_string(obj, name, kCode);
}

std::vector<hsize_t> FileReader::float_shape(const std::string& name, std::size_t rank) const {
  if (!h5::exists(file, name)) bad(name + ": missing");
  probe(name);
  if (!h5::is_dataset(file, name)) bad(name + ": is not a dataset");
  h5::DataSet ds = h5::open_dataset(file, name, kCode);
  h5::DataType t = h5::type_of(ds.get());
  if (H5Tget_class(t.get()) != H5T_FLOAT)
    bad(name + ": dtype " + h5::type_name(t.get()) + " is not a float type (need float32)");
  std::vector<hsize_t> s = h5::shape(ds.get());
  if (rank ? s.size() != rank : (s.empty() || s.size() > kMaxTensorRank))
    bad(name + ": shape " + h5::shape_string(s) + " has rank " + std::to_string(s.size()) +
        ", need rank " + (rank ? std::to_string(rank) : "1 to " + std::to_string(kMaxTensorRank)));
  for (hsize_t x : s)
    if (x == 0 || x > hsize_t(std::numeric_limits<int>::max()))
      bad(name + ": shape " + h5::shape_string(s) + " has an empty or oversized dimension");
  // A damaged or hostile file can claim a huge shape with nothing stored
  // (HDF5 would return fill values): refuse it before anything is sized
  // by that shape.
  if (H5Dget_storage_size(ds.get()) == 0)
    bad(name + ": shape " + h5::shape_string(s) + " but no data stored in the file");
  return s;
}

void FileReader::read_floats(const std::string& name, float* dst, std::size_t count,
                             std::size_t row_len) const {
  h5::DataSet ds = h5::open_dataset(file, name, kCode);
  h5::read_all(ds.get(), H5T_NATIVE_FLOAT, dst, kCode);
  const float* bad_at = std::find_if(dst, dst + count, [](float v) { return !std::isfinite(v); });
  if (bad_at == dst + count) return;
  const std::size_t at = bad_at - dst;
  const std::string kind = std::isnan(*bad_at) ? "NaN" : (*bad_at > 0 ? "Inf" : "-Inf");
  std::string where = std::to_string(row_len > 1 ? at / row_len : at);
  if (row_len > 1) where += ", " + std::to_string(at % row_len);
  bad(name + ": " + kind + " at index [" + where + "] (a checkpoint holds finite values only)");
}

std::vector<float> FileReader::arena(const std::string& base,
                                     const std::vector<ParamInfo>& layout) const {
  check_arena(base, layout);
  std::vector<float> v(arena_size(layout));
  for (const ParamInfo& t : layout) read_tensor(base, t, v.data() + t.offset);
  return v;
}

void FileReader::read_tensor(const std::string& base, const ParamInfo& t, float* dst) const {
  read_floats(base + "/" + t.path(), dst, t.count, t.count / t.shape.front());
}

void FileReader::check_arena(const std::string& base, const std::vector<ParamInfo>& layout) const {
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const ParamInfo& t = layout[i];
    const std::string g = base + "/" + t.layer;
    if ((i == 0 || layout[i - 1].layer != t.layer) && h5::exists(file, g)) probe(g);
    const auto s = float_shape(g + "/" + t.name, t.shape.size());
    if (!std::equal(s.begin(), s.end(), t.shape.begin()))
      bad(g + "/" + t.name + ": shape " + h5::shape_string(s) + " does not match " +
          dims_string(t.shape) + ", the shape " + layout_source + " gives");
  }
}

}  // namespace dptrain::ckpt
