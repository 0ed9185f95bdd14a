// Implements: read_checkpoint (checkpoint.hpp): every check of DESIGN.md
// section 4 — format, version, shapes against each other, sizes before
// allocating, finite values, checksummed data and metadata — so a damaged or
// hostile file becomes one Error(kCheckpoint) naming the file and the problem.
#include <algorithm>
#include <cmath>
#include <limits>

#include "checkpoint_format.hpp"
#include "dptrain/checkpoint.hpp"

namespace dptrain {
namespace {

using namespace ckpt;

struct Reader {
  hid_t file;
  const std::string& path;

  [[noreturn]] void bad(const std::string& what) const { fail(path, what); }

  // h5::exists and h5::has_attr read "cannot read" as "absent". Loading an
  // object's header, attributes and links (all checksummed in our files)
  // before asking about them makes damage say so, not "missing".
  void probe(const std::string& name) const {
    h5::quiet();
    h5::Handle<H5Oclose> o(H5Oopen(file, name.c_str(), H5P_DEFAULT));
    auto attr_cb = [](hid_t, const char*, const H5A_info_t*, void*) -> herr_t { return 0; };
    auto link_cb = [](hid_t, const char*, const H5L_info_t*, void*) -> herr_t { return 0; };
    bool ok = o && H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, attr_cb,
                               nullptr) >= 0;
    if (ok && H5Iget_type(o.get()) == H5I_GROUP)
      ok = H5Literate(o.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, link_cb, nullptr) >= 0;
    if (!ok) bad(name + ": damaged file metadata (" + h5::last_error() + ")");
  }

  // A string attribute, refused when its stored size is absurd: the reader
  // would allocate whatever size a damaged type declares.
  std::string attr_string(hid_t obj, const std::string& where, const char* name) const {
    if (h5::has_attr(obj, name)) {
      h5::Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
      if (a && H5Aget_storage_size(a.get()) > kMaxAttrBytes)
        bad(where + ": attribute '" + name + "' is larger than 16 MiB");
    }
    return h5::read_attr_string(obj, name, kCode);
  }

  // Shape of a float dataset that must exist; checks dtype and rank only.
  std::vector<hsize_t> float_shape(const std::string& name, std::size_t rank) const {
    if (!h5::exists(file, name)) bad(name + ": missing");
    probe(name);
    if (!h5::is_dataset(file, name)) bad(name + ": is not a dataset");
    h5::DataSet ds = h5::open_dataset(file, name, kCode);
    h5::DataType t = h5::type_of(ds.get());
    if (H5Tget_class(t.get()) != H5T_FLOAT)
      bad(name + ": dtype " + h5::type_name(t.get()) + " is not a float type (need float32)");
    std::vector<hsize_t> s = h5::shape(ds.get());
    if (s.size() != rank)
      bad(name + ": shape " + h5::shape_string(s) + " has rank " + std::to_string(s.size()) +
          ", need rank " + std::to_string(rank));
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

  // Reads name (already shape-checked) into dst and checks every value.
  void read_floats(const std::string& name, float* dst, std::size_t count,
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

  // Walks /model/dense0, dense1, ... until one is missing.
  std::vector<DenseInfo> model_layout() const {
    std::vector<DenseInfo> layout;
    std::uint64_t total = 0;
    for (std::size_t i = 0;; ++i) {
      const std::string g = "/model/" + layer_group(i);
      if (!h5::exists(file, g)) break;
      if (i >= kMaxLayers) bad("/model: more than " + std::to_string(kMaxLayers) + " dense layers");
      probe(g);
      if (!h5::is_group(file, g)) bad(g + ": is not a group");
      const auto w = float_shape(g + "/weight", 2);
      const auto b = float_shape(g + "/bias", 1);
      if (b[0] != w[0])
        bad(g + ": bias has " + std::to_string(b[0]) + " values but weight " +
            h5::shape_string(w) + " has " + std::to_string(w[0]) + " output rows");
      if (i > 0 && w[1] != hsize_t(layout.back().out))
        bad(g + "/weight: shape " + h5::shape_string(w) + " takes " + std::to_string(w[1]) +
            " inputs but " + layout.back().name + " has " + std::to_string(layout.back().out) +
            " outputs");
      DenseInfo d;
      d.name = layer_group(i);
      d.out = static_cast<int>(w[0]);
      d.in = static_cast<int>(w[1]);
      d.weight_offset = total;
      d.bias_offset = total + w[0] * w[1];
      total = d.bias_offset + w[0];  // dims are < 2^31, so this cannot overflow
      if (total > kMaxFloats)
        bad("/model: more than 2^34 parameters; refusing to load (a damaged file?)");
      layout.push_back(d);
    }
    if (layout.empty()) bad("/model: no dense0 group (expected /model/dense0/weight and bias)");
    // A gap (dense0, dense2) would silently drop layers.
    for (const auto& c : h5::children(h5::open_group(file, "/model", kCode).get())) {
      if (c.rfind("dense", 0) != 0 || c.size() == 5 ||
          c.find_first_not_of("0123456789", 5) != std::string::npos)
        continue;
      if (c.size() > 10 || std::stoul(c.substr(5)) >= layout.size())
        bad("/model/" + c + ": present, but /model/" + layer_group(layout.size()) + " is missing");
    }
    return layout;
  }

  // One arena from <base>/dense<i>; shapes must equal the model's.
  std::vector<float> arena(const std::string& base, const std::vector<DenseInfo>& layout,
                           std::size_t n) const {
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const DenseInfo& d = layout[i];
      const std::string g = base + "/" + layer_group(i);
      if (h5::exists(file, g)) probe(g);
      const auto w = float_shape(g + "/weight", 2);
      const auto b = float_shape(g + "/bias", 1);
      if (w[0] != hsize_t(d.out) || w[1] != hsize_t(d.in) || b[0] != hsize_t(d.out))
        bad(g + ": weight " + h5::shape_string(w) + " and bias " + h5::shape_string(b) +
            " do not match /model/" + d.name + " (weight [" + std::to_string(d.out) + ", " +
            std::to_string(d.in) + "], bias [" + std::to_string(d.out) + "])");
    }
    std::vector<float> v(n);
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const DenseInfo& d = layout[i];
      const std::string g = base + "/" + layer_group(i);
      read_floats(g + "/weight", v.data() + d.weight_offset, std::size_t(d.out) * d.in, d.in);
      read_floats(g + "/bias", v.data() + d.bias_offset, d.out, 1);
    }
    return v;
  }

  // required: a dptrain checkpoint read for resuming needs every attribute.
  void meta(CheckpointMeta& m, bool required) const {
    auto str = [&](const char* name, std::string& out) {
      if (required || h5::has_attr(file, name)) out = attr_string(file, "/", name);
    };
    auto i64 = [&](const char* name, std::int64_t& out) {
      if (required || h5::has_attr(file, name)) out = h5::read_attr_int64(file, name, kCode);
    };
    str("model", m.model);
    str("loss", m.loss);
    str("config", m.config);
    str("optimizer", m.optimizer);
    i64("step", m.step);
    i64("epoch", m.epoch);
    i64("epoch_position", m.epoch_position);
    i64("world_size", m.world_size);
    i64("optimizer_step", m.optimizer_step);
    if (required || h5::has_attr(file, "seed")) m.seed = h5::read_attr_uint64(file, "seed", kCode);
    if (m.step < 0 || m.epoch < 0 || m.epoch_position < 0 || m.world_size < 1 ||
        m.optimizer_step < 0)
      bad("negative step, epoch, epoch_position or optimizer_step, or world_size < 1");
  }

  // The spec's dense widths must be the stored ones (the input width is not
  // in the spec).
  void check_spec(const std::string& spec, const std::vector<DenseInfo>& layout) const {
    std::vector<int> units;
    try {
      for (const auto& l : parse_model_spec(spec))
        if (l.kind == LayerSpec::Kind::kDense) units.push_back(l.units);
    } catch (const Error&) {
      bad("model attribute '" + spec + "' is not a valid --model spec");
    }
    bool same = units.size() == layout.size();
    for (std::size_t i = 0; same && i < units.size(); ++i) same = units[i] == layout[i].out;
    if (!same) bad("model attribute '" + spec + "' does not match the /model layer shapes");
  }

  std::vector<CheckpointData::State> optimizer(const CheckpointData& d) const {
    std::vector<CheckpointData::State> out;
    if (d.meta.optimizer.empty() && !h5::exists(file, "/optimizer")) return out;
    if (h5::exists(file, "/optimizer")) probe("/optimizer");
    h5::Group g = h5::open_group(file, "/optimizer", kCode);
    std::vector<std::string> names;
    if (h5::has_attr(g.get(), "states")) {
      const std::string list = attr_string(g.get(), "/optimizer", "states");
      for (std::size_t p = 0; p < list.size();) {
        std::size_t c = std::min(list.find(',', p), list.size());
        names.push_back(list.substr(p, c - p));
        p = c + 1;
      }
    } else {
      names = h5::children(g.get());
    }
    if (names.size() > kMaxStates) bad("/optimizer: more than 8 state arrays");
    for (const auto& n : names) {
      if (n.empty() || n.find('/') != std::string::npos) bad("/optimizer: bad state name '" + n + "'");
      if (h5::exists(file, "/optimizer/" + n)) probe("/optimizer/" + n);
      out.push_back({n, arena("/optimizer/" + n, d.layout, d.params.size())});
    }
    return out;
  }

  void rng(const CheckpointMeta& m) const {
    if (h5::exists(file, "/rng")) probe("/rng");
    h5::Group g = h5::open_group(file, "/rng", kCode);
    const std::string algo = attr_string(g.get(), "/rng", "algorithm");
    if (algo != "splitmix64") bad("/rng: algorithm '" + algo + "' is not splitmix64");
    if (h5::read_attr_uint64(g.get(), "seed", kCode) != m.seed)
      bad("/rng: seed differs from the root seed attribute");
  }
};

CheckpointData read_impl(const std::string& path, bool model_only) {
  h5::File f = h5::open_read(path, kCode);
  const Reader r{f.get(), path};
  r.probe("/");
  if (h5::exists(f.get(), "/model")) r.probe("/model");
  const bool has_format = h5::has_attr(f.get(), "format");
  const bool has_model = h5::is_group(f.get(), "/model");
  if (has_format) {
    const std::string fmt = r.attr_string(f.get(), "/", "format");
    if (fmt != kFormat)
      r.bad("not a dptrain checkpoint (format attribute is '" + fmt + "', expected '" + kFormat +
            "')");
    if (!h5::has_attr(f.get(), "version")) r.bad("no version attribute");
    const std::int64_t v = h5::read_attr_int64(f.get(), "version", kCode);
    if (v != kVersion)
      r.bad("unsupported checkpoint version " + std::to_string(v) + " (this build reads version " +
            std::to_string(kVersion) + ")");
  } else if (!model_only || !has_model) {
    r.bad(std::string("not a dptrain checkpoint (no format attribute") +
          (has_model ? "; a file with only /model is accepted by --init-from only)" : ")"));
  }
  if (!has_model) r.bad("no /model group");

  CheckpointData d;
  const bool full = has_format && !model_only;
  r.meta(d.meta, full);
  d.layout = r.model_layout();
  if (!d.meta.model.empty()) r.check_spec(d.meta.model, d.layout);
  const DenseInfo& last = d.layout.back();
  d.params = r.arena("/model", d.layout, last.bias_offset + last.out);
  if (full) {
    d.optimizer_state = r.optimizer(d);
    r.rng(d.meta);
    d.has_training_state = true;
  }
  return d;
}

}  // namespace

CheckpointData read_checkpoint(const std::string& path, bool model_only) {
  try {
    return read_impl(path, model_only);
  } catch (const Error& e) {
    if (e.code() == kCode && e.where() == path) throw;
    fail(path, strip_prefix(e.what(), path));
  }
}

}  // namespace dptrain
