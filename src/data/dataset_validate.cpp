// Implements: the scans of Dataset::validate() (dataset_validate.hpp), in
// passes of kValidateBytes so that memory stays bounded whatever the set's
// size.
#include "data/dataset_validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "data/feature_hdf5.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/feature_types.hpp"

namespace dptrain {
namespace {

#define DPT_DATA_FAIL(msg) ::dptrain::throw_error(ExitCode::kData, (msg), __FILE__, __LINE__)

constexpr std::size_t kValidateBytes = std::size_t(16) << 20;  // per validation pass

std::string float_name(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "Inf" : "-Inf"); }

}  // namespace

// validate() over one file's rows; indices in messages are the file's own.
std::int64_t validate_part(const SetPart& m, const SetInfo& info, std::int64_t num_classes) {
  const std::uint64_t n = m.rows, d = info.dim, k = info.label_width;
  // Integers are always finite; float16 may hold Inf and NaN like float32.
  const bool check_features =
      info.feature_type == FeatureType::kFloat32 || info.feature_type == FeatureType::kFloat16;
  const std::uint64_t row_bytes = (check_features ? d * 6 : 0) + k * 8;
  const std::uint64_t step = std::max<std::uint64_t>(1, kValidateBytes / row_bytes);
  std::vector<float> fbuf, tbuf;
  std::vector<std::uint16_t> half_buf;
  std::vector<std::int64_t> lbuf;
  std::int64_t max_label = -1;
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

  for (std::uint64_t begin = 0; begin < n; begin += step) {
    const std::uint64_t cnt = std::min(step, n - begin);
    std::uint64_t bad_feature = kNone, bad_label = kNone;
    std::string feature_msg, label_msg;
    if (check_features) {
      fbuf.resize(cnt * d);
      if (info.feature_type == FeatureType::kFloat16) {
        half_buf.resize(cnt * d);
        h5::read_rows(m.features.get(), feature_memory_type(FeatureType::kFloat16), begin, cnt,
                      half_buf.data(), ExitCode::kData);
        convert_features(FeatureType::kFloat16, half_buf.data(), half_buf.size(), fbuf.data());
      } else {
        h5::read_rows(m.features.get(), H5T_NATIVE_FLOAT, begin, cnt, fbuf.data(), ExitCode::kData);
      }
      auto it = std::find_if(fbuf.begin(), fbuf.end(), [](float v) { return !std::isfinite(v); });
      if (it != fbuf.end()) {
        std::uint64_t at = it - fbuf.begin();
        bad_feature = begin + at / d;
        feature_msg = m.features_name + ": " + float_name(*it) + " at index " +
                      std::to_string(bad_feature) + " (element " + std::to_string(at % d) +
                      " of the row)";
      }
    }
    if (info.label_type == LabelType::kClass) {
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
  return info.label_type == LabelType::kClass ? max_label : -1;
}

// validate() over one file's token windows: every id in [0, vocab_size).
std::int64_t validate_token_part(const SetPart& m, const SetInfo& info) {
  const std::uint64_t n = m.rows, width = info.dim + 1;
  const std::uint64_t step = std::max<std::uint64_t>(1, kValidateBytes / (width * 8));
  const auto vocab = static_cast<std::int64_t>(info.vocab_size);
  std::vector<std::int64_t> ids;
  std::int64_t max_id = -1;
  for (std::uint64_t begin = 0; begin < n; begin += step) {
    const std::uint64_t cnt = std::min(step, n - begin);
    ids.resize(cnt * width);
    h5::read_rows(m.features.get(), H5T_NATIVE_INT64, begin, cnt, ids.data(), ExitCode::kData);
    const auto bad = std::find_if(ids.begin(), ids.end(),
                                  [vocab](std::int64_t v) { return v < 0 || v >= vocab; });
    if (bad != ids.end()) {
      const std::uint64_t at = static_cast<std::uint64_t>(bad - ids.begin());
      DPT_DATA_FAIL(m.features_name + ": id " + std::to_string(*bad) + " at index " +
                    std::to_string(begin + at / width) + " (position " + std::to_string(at % width) +
                    " of the window) is outside [0, " + std::to_string(vocab) + "), the vocab_size");
    }
    for (const std::int64_t v : ids) max_id = std::max(max_id, v);
  }
  return max_id;
}

}  // namespace dptrain
