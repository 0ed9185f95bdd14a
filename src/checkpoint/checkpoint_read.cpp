// Implements: read_checkpoint (checkpoint.hpp): every check of docs/design.md
// section 4 — format, version, shapes against each other, sizes before
// allocating, finite values, checksummed data and metadata — so a damaged or
// hostile file becomes one Error(kCheckpoint) naming the file and the problem.
#include <algorithm>
#include <limits>

#include "checkpoint/checkpoint_file_reader.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/model/layer_spec.hpp"

namespace dptrain {
namespace {

using namespace ckpt;

// The checks of what the file holds: its layouts, attributes, spec,
// optimizer state and random state, on top of FileReader's file-level checks.
struct Reader : FileReader {
  // The version 1 parameter layout: /model/dense0, dense1, ... until one is
  // missing, each a weight [out, in] taking the previous layer's outputs and
  // a bias [out].
  std::vector<ParamInfo> param_layout() const {
    std::vector<ParamInfo> layout;
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
      if (i > 0 && w[1] != hsize_t(layout.back().shape[0]))
        bad(g + "/weight: shape " + h5::shape_string(w) + " takes " + std::to_string(w[1]) +
            " inputs but " + layout.back().layer + " has " +
            std::to_string(layout.back().shape[0]) + " outputs");
      // Dimensions are below 2^31, so these products cannot overflow.
      const std::size_t at = arena_size(layout);
      layout.push_back({layer_group(i), "weight", {w[0], w[1]}, at, w[0] * w[1]});
      layout.push_back({layer_group(i), "bias", {b[0]}, at + w[0] * w[1], b[0]});
      if (arena_size(layout) > kMaxFloats)
        bad("/model: more than 2^34 parameters; refusing to load (a damaged file?)");
    }
    if (layout.empty()) bad("/model: no dense0 group (expected /model/dense0/weight and bias)");
    // A gap (dense0, dense2) would silently drop layers.
    const std::size_t layers = layout.size() / 2;
    for (const auto& c : h5::children(h5::open_group(file, "/model", kCode).get())) {
      if (c.rfind("dense", 0) != 0 || c.size() == 5 ||
          c.find_first_not_of("0123456789", 5) != std::string::npos)
        continue;
      if (c.size() > 10 || std::stoul(c.substr(5)) >= layers)
        bad("/model/" + c + ": present, but /model/" + layer_group(layers) + " is missing");
    }
    return layout;
  }

  // The buffer layout that the /model attribute `buffers` lists, with the
  // stored shapes; empty without the attribute (version 1 MLP files).
  std::vector<ParamInfo> buffer_layout() const {
    std::vector<ParamInfo> layout;
    h5::Group model = h5::open_group(file, "/model", kCode);
    if (!h5::has_attr(model.get(), kBuffersAttr)) return layout;
    const std::string list = attr_string(model.get(), "/model", kBuffersAttr);
    for (std::size_t p = 0; p < list.size();) {
      const std::size_t c = std::min(list.find(',', p), list.size());
      const std::string entry = list.substr(p, c - p);
      p = c + 1;
      const std::size_t slash = entry.rfind('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == entry.size())
        bad("/model: bad entry '" + entry + "' in the buffers attribute (need <layer>/<name>)");
      if (layout.size() >= std::size_t(kMaxLayers))
        bad("/model: more than " + std::to_string(kMaxLayers) + " buffers");
      const auto shape = float_shape("/model/" + entry, 0);
      ParamInfo t{entry.substr(0, slash), entry.substr(slash + 1), {}, arena_size(layout), 1};
      for (hsize_t d : shape) {
        t.shape.push_back(d);
        // Checked before multiplying, so a hostile shape cannot overflow.
        t.count = t.count > kMaxFloats / d ? kMaxFloats + 1 : t.count * d;
      }
      if (t.offset + t.count > kMaxFloats)
        bad("/model: more than 2^34 buffer values; refusing to load (a damaged file?)");
      layout.push_back(std::move(t));
    }
    return layout;
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

  // The input_shape attribute (version 2), or empty.
  std::vector<std::size_t> input_shape() const {
    if (!h5::has_attr(file, kInputShapeAttr)) return {};
    const auto dims = h5::read_attr_int64s(file, kInputShapeAttr, Shape::kMaxRank, kCode);
    if (dims.empty()) bad("input_shape attribute is empty");
    std::vector<std::size_t> shape;
    for (std::int64_t v : dims) {
      if (v < 1 || v > std::numeric_limits<int>::max())
        bad("input_shape attribute has a dimension of " + std::to_string(v));
      shape.push_back(static_cast<std::size_t>(v));
    }
    return shape;
  }

  // The vocab_size attribute (token models), or 0.
  std::int64_t vocab_size() const {
    if (!h5::has_attr(file, kVocabAttr)) return 0;
    const std::int64_t v = h5::read_attr_int64(file, kVocabAttr, kCode);
    if (v < 1 || v > std::numeric_limits<std::int32_t>::max())
      bad("vocab_size attribute " + std::to_string(v) + " is not in [1, 2^31)");
    return v;
  }

  // The tensors the model attribute's spec has for this input shape.
  ModelLayout spec_layout(const std::string& spec, const std::vector<std::size_t>& input,
                          std::int64_t vocab) const {
    try {
      const std::vector<LayerSpec> specs = parse_model_spec(spec);
      if (specs.size() > kMaxSpecLayers) bad("model attribute '" + spec + "' has too many layers");
      return model_layout(specs, shape_of(input), static_cast<int>(vocab));
    } catch (const Error& e) {
      if (e.code() == kCode) throw;
      bad("model attribute '" + spec + "' does not build for input_shape " + dims_string(input) +
          ": " + e.what());
    }
  }

  static Shape shape_of(const std::vector<std::size_t>& dims) {
    switch (dims.size()) {
      case 1: return Shape{int(dims[0])};
      case 2: return Shape{int(dims[0]), int(dims[1])};
      case 3: return Shape{int(dims[0]), int(dims[1]), int(dims[2])};
      default: return Shape{int(dims[0]), int(dims[1]), int(dims[2]), int(dims[3])};
    }
  }

  // The spec must give the stored layout. Version 1 files do not store the
  // input shape; dense0's weight gives the flat input width.
  void check_spec(const std::string& spec, const CheckpointData& d) const {
    std::vector<LayerSpec> specs;
    try {
      specs = parse_model_spec(spec);
    } catch (const Error&) {
      bad("model attribute '" + spec + "' is not a valid --model spec");
    }
    bool same = false;
    try {
      // A spec of far more layers than any file holds is not worth building.
      if (specs.size() <= kMaxSpecLayers) {
        const int input = static_cast<int>(d.param_layout.front().shape.back());
        const ModelLayout want = model_layout(specs, Shape{input});
        same = want.params == d.param_layout && want.buffers == d.buffer_layout;
      }
    } catch (const Error&) {
      // A spec whose layers cannot take that input does not match either.
    }
    if (!same) bad("model attribute '" + spec + "' does not match the /model layer shapes");
  }

  // deferred: the arrays' shapes are checked, their values left unread.
  std::vector<CheckpointData::State> optimizer(const CheckpointData& d, bool deferred) const {
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
      if (deferred) {
        check_arena("/optimizer/" + n, d.param_layout);
        out.push_back({n, {}, {}});
      } else {
        out.push_back({n, arena("/optimizer/" + n, d.param_layout), {}});
      }
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

// deferred: the parameter and optimizer arrays are shape-checked only.
CheckpointData read_impl(const h5::File& f, const std::string& path, bool model_only,
                         const ModelLayout* expect, bool deferred) {
  Reader r{{f.get(), path}};
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
    if (v < 1 || v > kVersion)
      r.bad("unsupported checkpoint version " + std::to_string(v) + " (this build reads versions 1 to " +
            std::to_string(kVersion) + ")");
  } else if (!model_only || !has_model) {
    r.bad(std::string("not a dptrain checkpoint (no format attribute") +
          (has_model ? "; a file with only /model is accepted by --init-from only)" : ")"));
  }
  if (!has_model) r.bad("no /model group");

  CheckpointData d;
  const bool full = has_format && !model_only;
  r.meta(d.meta, full);
  d.input_shape = r.input_shape();
  d.vocab_size = r.vocab_size();
  if (!d.meta.model.empty() && !d.input_shape.empty()) {
    const ModelLayout layout = r.spec_layout(d.meta.model, d.input_shape, d.vocab_size);
    d.param_layout = layout.params;
    d.buffer_layout = layout.buffers;
    r.layout_source = "the model attribute '" + d.meta.model + "' for input_shape " +
                      dims_string(d.input_shape);
    // The buffers the file lists must be the spec's (the same names, shapes
    // and order).
    if (r.buffer_layout() != d.buffer_layout)
      r.bad("model attribute '" + d.meta.model + "' does not match the buffers /model lists");
  } else if (d.meta.model.empty() && expect) {
    d.param_layout = expect->params;
    d.buffer_layout = expect->buffers;
    r.layout_source = "the model it is loaded into";
  } else {
    d.param_layout = r.param_layout();
    d.buffer_layout = r.buffer_layout();
    if (!d.meta.model.empty()) r.check_spec(d.meta.model, d);
    d.input_shape = {d.param_layout.front().shape.back()};
  }
  if (deferred) r.check_arena("/model", d.param_layout);
  else d.params = r.arena("/model", d.param_layout);
  d.buffers = r.arena("/model", d.buffer_layout);
  if (full) {
    d.optimizer_state = r.optimizer(d, deferred);
    r.rng(d.meta);
    d.has_training_state = true;
  }
  return d;
}

// Runs a read, reporting any error as Error(kCheckpoint) naming path.
template <typename Read>
auto naming_path(const std::string& path, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    if (e.code() == kCode && e.where() == path) throw;
    fail(path, strip_prefix(e.what(), path));
  }
}

// The file stays open; a tensor is read and checked when asked for.
class OpenTensors final : public CheckpointTensors {
 public:
  OpenTensors(h5::File file, std::string path, std::vector<std::string> arrays)
      : file_(std::move(file)), path_(std::move(path)), arrays_(std::move(arrays)) {}
  void read(std::size_t array, const ParamInfo& p, float* out) override {
    DPT_REQUIRE(array < arrays_.size(), ExitCode::kOther, "checkpoint array out of range");
    naming_path(path_, [&] {
      const FileReader r{file_.get(), path_};
      r.read_tensor(arrays_[array], p, out);
    });
  }

 private:
  h5::File file_;
  std::string path_;
  std::vector<std::string> arrays_;  // "/model", "/optimizer/<name>", ...
};

}  // namespace

CheckpointData read_checkpoint(const std::string& path, bool model_only, const ModelLayout* expect) {
  return naming_path(path, [&] {
    h5::File f = h5::open_read(path, kCode);
    return read_impl(f, path, model_only, expect, false);
  });
}

OpenedCheckpoint open_checkpoint(const std::string& path, bool model_only,
                                 const ModelLayout* expect) {
  return naming_path(path, [&] {
    h5::File f = h5::open_read(path, kCode);
    OpenedCheckpoint out{read_impl(f, path, model_only, expect, true), nullptr};
    std::vector<std::string> arrays{"/model"};
    for (const auto& st : out.data.optimizer_state) arrays.push_back("/optimizer/" + st.name);
    out.tensors = std::make_unique<OpenTensors>(std::move(f), path, std::move(arrays));
    return out;
  });
}

void verify_checkpoint(const std::string& path) {
  OpenedCheckpoint ck = open_checkpoint(path);
  std::size_t largest = 0;
  for (const ParamInfo& p : ck.data.param_layout) largest = std::max(largest, p.count);
  std::vector<float> scratch(largest);
  for (std::size_t a = 0; a <= ck.data.optimizer_state.size(); ++a)
    for (const ParamInfo& p : ck.data.param_layout) ck.tensors->read(a, p, scratch.data());
}

}  // namespace dptrain
