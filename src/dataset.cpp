// Implements: Dataset (dataset.hpp) on the h5 wrappers: structural checks at
// open, a bounded-memory validation pass, and hyperslab row reads.
#include "dptrain/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dptrain/error.hpp"
#include "h5.hpp"

namespace dptrain {
namespace {

#define DPT_DATA_FAIL(msg) ::dptrain::throw_error(ExitCode::kData, (msg), __FILE__, __LINE__)

// Sizes above this are a broken or hostile file, not data we could train on;
// refusing early turns a would-be OOM into a message.
constexpr std::uint64_t kMaxSetBytes = std::uint64_t(1) << 40;
// validate() and the input queue hold at least one whole row, so a bound on
// the set alone would still let one [1, 2^38] row allocate a terabyte.
constexpr std::uint64_t kMaxRowBytes = std::uint64_t(256) << 20;
constexpr std::size_t kValidateBytes = std::size_t(16) << 20;  // per validation pass
constexpr std::size_t kMinChunkCache = std::size_t(1) << 20;
constexpr std::size_t kMaxChunkCache = std::size_t(256) << 20;

// a * b, or 0 on overflow (callers reject 0 separately).
std::uint64_t mul_or_zero(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

std::size_t next_prime(std::size_t n) {
  auto prime = [](std::size_t x) {
    for (std::size_t d = 2; d * d <= x; ++d)
      if (x % d == 0) return false;
    return x >= 2;
  };
  while (!prime(n)) ++n;
  return n;
}

// A chunk cache that holds every chunk one row-run touches, so reading row
// by row (full shuffle, streaming) decompresses each chunk once, not per row.
h5::PropList chunk_cache_for(const std::vector<hsize_t>& shape, const std::vector<hsize_t>& chunk,
                             std::size_t elem_bytes) {
  h5::PropList dapl(h5::check(H5Pcreate(H5P_DATASET_ACCESS), ExitCode::kData, "dataset access"));
  if (chunk.size() != shape.size() || chunk.empty()) return dapl;
  std::uint64_t chunk_bytes = elem_bytes, run_chunks = 1;
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    chunk_bytes *= chunk[i];
    if (i > 0) run_chunks *= (shape[i] + chunk[i] - 1) / chunk[i];
  }
  std::size_t bytes = std::clamp<std::uint64_t>(chunk_bytes * run_chunks, kMinChunkCache,
                                                kMaxChunkCache);
  std::size_t slots = next_prime(100 * std::max<std::uint64_t>(1, bytes / chunk_bytes) + 1);
  H5Pset_chunk_cache(dapl.get(), slots, bytes, 1.0);
  return dapl;
}

std::string float_name(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "Inf" : "-Inf"); }

std::string set_group(const std::string& set) {
  std::string g = set;
  while (!g.empty() && g.front() == '/') g.erase(g.begin());
  return "/" + g;
}

}  // namespace

void convert_features(FeatureType type, const void* raw, std::size_t count, float* out) {
  if (type == FeatureType::kFloat32) {
    std::memcpy(out, raw, count * sizeof(float));
    return;
  }
  const auto* in = static_cast<const std::uint8_t*>(raw);
  constexpr float kScale = 1.0f / 255.0f;
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]) * kScale;
}

struct Dataset::Impl {
  h5::File file;
  h5::DataSet features, labels;
  std::string features_name, labels_name;  // "file: /set/features" for messages
};

Dataset::Dataset(const std::string& file, const std::string& set)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  info_.file = file;
  info_.set = set;
  m.file = h5::open_read(file, ExitCode::kData);
  const hid_t f = m.file.get();
  const std::string group = set_group(set);
  if (!h5::is_group(f, group)) {
    std::string known;
    for (const auto& s : list_sets(file)) known += (known.empty() ? "" : ", ") + s;
    DPT_DATA_FAIL(file + ": no set '" + set + "' (group " + group + " not found; sets in the file: " +
                  (known.empty() ? "none" : known) + ")");
  }
  m.features_name = file + ": " + group + "/features";
  m.labels_name = file + ": " + group + "/labels";
  if (!h5::exists(f, group + "/features")) DPT_DATA_FAIL(m.features_name + ": missing");
  if (!h5::exists(f, group + "/labels")) DPT_DATA_FAIL(m.labels_name + ": missing");

  // --- features: dtype, rank, D --------------------------------------------
  h5::DataSet feat = h5::open_dataset(f, group + "/features", ExitCode::kData);
  h5::DataType ft = h5::type_of(feat.get());
  const auto fclass = H5Tget_class(ft.get());
  if (fclass == H5T_FLOAT && H5Tget_size(ft.get()) == 4) {
    info_.feature_type = FeatureType::kFloat32;
  } else if (fclass == H5T_INTEGER && H5Tget_size(ft.get()) == 1 &&
             H5Tget_sign(ft.get()) == H5T_SGN_NONE) {
    info_.feature_type = FeatureType::kUint8;
  } else {
    DPT_DATA_FAIL(m.features_name + ": dtype " + h5::type_name(ft.get()) +
                  " is not supported (need float32 or uint8)");
  }
  const std::vector<hsize_t> fshape = h5::shape(feat.get());
  // [N, F], [N, H, W], [N, C, H, W] or [N, C, D, H, W] (DESIGN.md section 3).
  if (fshape.size() < 2 || fshape.size() > 5)
    DPT_DATA_FAIL(m.features_name + ": rank " + std::to_string(fshape.size()) + " shape " +
                  h5::shape_string(fshape) +
                  " is not supported (need [N, F], [N, H, W], [N, C, H, W] or [N, C, D, H, W])");
  info_.feature_shape.assign(fshape.begin(), fshape.end());

  // --- labels: class ids [N] or targets [N, K] -------------------------------
  h5::DataSet lab = h5::open_dataset(f, group + "/labels", ExitCode::kData);
  h5::DataType lt = h5::type_of(lab.get());
  const std::vector<hsize_t> lshape = h5::shape(lab.get());
  const std::string ltype = h5::type_name(lt.get());
  if (ltype == "int32" || ltype == "int64") {
    if (lshape.size() != 1)
      DPT_DATA_FAIL(m.labels_name + ": " + ltype + " labels of shape " + h5::shape_string(lshape) +
                    " must be [N] class ids (or float32 [N, K] targets)");
    info_.label_type = LabelType::kClass;
    info_.label_width = 1;
  } else if (ltype == "float32") {
    if (lshape.size() != 2)
      DPT_DATA_FAIL(m.labels_name + ": float32 labels of shape " + h5::shape_string(lshape) +
                    " must be [N, K] targets (or int32/int64 [N] class ids)");
    info_.label_type = LabelType::kTarget;
    info_.label_width = lshape[1];
    if (info_.label_width == 0) DPT_DATA_FAIL(m.labels_name + ": targets have width K = 0");
  } else {
    DPT_DATA_FAIL(m.labels_name + ": dtype " + ltype +
                  " is not supported (need int32/int64 class ids or float32 targets)");
  }

  // --- N and sizes, before anything is allocated ------------------------------
  info_.rows = fshape[0];
  if (lshape[0] != fshape[0])
    DPT_DATA_FAIL(file + ": " + group + ": features have " + std::to_string(fshape[0]) +
                  " rows but labels have " + std::to_string(lshape[0]));
  if (info_.rows == 0) DPT_DATA_FAIL(m.features_name + ": no rows (N = 0)");
  std::uint64_t dim = 1;
  for (std::size_t i = 1; i < fshape.size(); ++i) dim = mul_or_zero(dim, fshape[i]);
  bool zero_dim = std::find(fshape.begin() + 1, fshape.end(), hsize_t(0)) != fshape.end();
  if (zero_dim) DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) + " has D = 0");
  info_.dim = dim;
  const std::uint64_t feature_bytes =
      dim == 0 ? 0 : mul_or_zero(info_.rows, mul_or_zero(dim, fclass == H5T_FLOAT ? 4 : 1));
  if (feature_bytes == 0 || feature_bytes > kMaxSetBytes)
    DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) +
                  " is too large (over 2^40 bytes)");
  if (info_.feature_bytes_per_row() > kMaxRowBytes)
    DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) +
                  " has rows larger than 256 MiB");
  if (info_.label_bytes_per_row() > kMaxRowBytes)
    DPT_DATA_FAIL(m.labels_name + ": shape " + h5::shape_string(lshape) +
                  " has rows larger than 256 MiB");
  const std::uint64_t label_bytes = mul_or_zero(info_.rows, mul_or_zero(info_.label_width, 4));
  if (label_bytes == 0 || label_bytes > kMaxSetBytes)
    DPT_DATA_FAIL(m.labels_name + ": shape " + h5::shape_string(lshape) +
                  " is too large (over 2^40 bytes)");

  // Reopen the features with a chunk cache sized from their chunk layout.
  const std::vector<hsize_t> chunk = h5::chunk_shape(feat.get());
  info_.chunk_rows = chunk.empty() ? 0 : chunk[0];
  feat.reset();
  h5::PropList dapl = chunk_cache_for(fshape, chunk, info_.feature_type == FeatureType::kUint8 ? 1 : 4);
  m.features = h5::open_dataset(f, group + "/features", ExitCode::kData, dapl.get());
  m.labels = std::move(lab);
}

Dataset::~Dataset() = default;

std::int64_t Dataset::validate(std::int64_t num_classes) {
  const Impl& m = *impl_;
  const std::uint64_t n = info_.rows, d = info_.dim, k = info_.label_width;
  const bool check_features = info_.feature_type == FeatureType::kFloat32;  // uint8 is always finite
  const std::uint64_t row_bytes = (check_features ? d * 4 : 0) + k * 8;
  const std::uint64_t step = std::max<std::uint64_t>(1, kValidateBytes / row_bytes);
  std::vector<float> fbuf, tbuf;
  std::vector<std::int64_t> lbuf;
  std::int64_t max_label = -1;
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

  for (std::uint64_t begin = 0; begin < n; begin += step) {
    const std::uint64_t cnt = std::min(step, n - begin);
    std::uint64_t bad_feature = kNone, bad_label = kNone;
    std::string feature_msg, label_msg;
    if (check_features) {
      fbuf.resize(cnt * d);
      h5::read_rows(m.features.get(), H5T_NATIVE_FLOAT, begin, cnt, fbuf.data(), ExitCode::kData);
      auto it = std::find_if(fbuf.begin(), fbuf.end(), [](float v) { return !std::isfinite(v); });
      if (it != fbuf.end()) {
        std::uint64_t at = it - fbuf.begin();
        bad_feature = begin + at / d;
        feature_msg = m.features_name + ": " + float_name(*it) + " at index " +
                      std::to_string(bad_feature) + " (element " + std::to_string(at % d) +
                      " of the row)";
      }
    }
    if (info_.label_type == LabelType::kClass) {
      lbuf.resize(cnt);
      h5::read_rows(m.labels.get(), H5T_NATIVE_INT64, begin, cnt, lbuf.data(), ExitCode::kData);
      for (std::uint64_t i = 0; i < cnt && bad_label == kNone; ++i) {
        const std::int64_t v = lbuf[i];
        std::string why;
        if (num_classes > 0 && (v < 0 || v >= num_classes))
          why = " is outside [0, " + std::to_string(num_classes) + ")";
        else if (v < 0)
          why = " is negative";
        else if (v > std::numeric_limits<std::int32_t>::max())
          why = " does not fit in int32";
        if (!why.empty()) {
          bad_label = begin + i;
          label_msg = m.labels_name + ": label " + std::to_string(v) + " at index " +
                      std::to_string(bad_label) + why;
        }
        max_label = std::max(max_label, v);
      }
    } else {
      tbuf.resize(cnt * k);
      h5::read_rows(m.labels.get(), H5T_NATIVE_FLOAT, begin, cnt, tbuf.data(), ExitCode::kData);
      auto it = std::find_if(tbuf.begin(), tbuf.end(), [](float v) { return !std::isfinite(v); });
      if (it != tbuf.end()) {
        std::uint64_t at = it - tbuf.begin();
        bad_label = begin + at / k;
        label_msg = m.labels_name + ": " + float_name(*it) + " at index " +
                    std::to_string(bad_label) + " (target " + std::to_string(at % k) + ")";
      }
    }
    if (bad_feature != kNone || bad_label != kNone)
      DPT_DATA_FAIL(bad_feature <= bad_label ? feature_msg : label_msg);
  }
  return info_.label_type == LabelType::kClass ? max_label : -1;
}

void Dataset::read_rows(std::uint64_t begin, std::uint64_t count, void* features, void* labels) {
  DPT_REQUIRE(begin <= info_.rows && count <= info_.rows - begin, ExitCode::kOther,
              info_.file + ": /" + info_.set + ": rows [" + std::to_string(begin) + ", " +
                  std::to_string(begin + count) + ") are past the end (" +
                  std::to_string(info_.rows) + " rows)");
  const Impl& m = *impl_;
  if (features) {
    hid_t type = info_.feature_type == FeatureType::kUint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
    h5::read_rows(m.features.get(), type, begin, count, features, ExitCode::kData);
  }
  if (labels) {
    // HDF5 converts int64 ids to int32 here (clipping); validate() has
    // already refused ids that do not fit.
    hid_t type = info_.label_type == LabelType::kClass ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    h5::read_rows(m.labels.get(), type, begin, count, labels, ExitCode::kData);
  }
}

std::vector<std::string> list_sets(const std::string& file) {
  h5::File f = h5::open_read(file, ExitCode::kData);
  std::vector<std::string> out;
  for (const auto& name : h5::children(f.get())) {
    const std::string g = "/" + name;
    if (h5::is_group(f.get(), g) && h5::is_dataset(f.get(), g + "/features") &&
        h5::is_dataset(f.get(), g + "/labels"))
      out.push_back(name);
  }
  return out;
}

}  // namespace dptrain
