// Implements: opening a set on rank 0 and sharing its shape (see
// shared_set.hpp).
#include "dptrain/data/shared_set.hpp"

#include <algorithm>

#include "dptrain/common/error.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/control_plane.hpp"

namespace dptrain {

namespace {

// What every rank needs to know about a set that only rank 0 opened.
struct SetShape {
  std::uint64_t rows, dim, label_width, chunk_rows, vocab_size;
  std::int32_t feature_type, label_type;
  std::int64_t max_label;
  std::uint64_t feature_dims[kMaxFeatureRank];  // the stored shape, N first
  std::int32_t feature_rank;
};

std::string shape_text(const SetInfo& i) {
  if (i.tokens())
    return std::to_string(i.rows) + " windows of T+1 = " + std::to_string(i.dim + 1) +
           " token ids, vocab_size " + std::to_string(i.vocab_size);
  return std::to_string(i.rows) + " rows of " + std::to_string(i.dim) + " " +
         feature_type_name(i.feature_type) + " values, " +
         (i.label_type == LabelType::kClass ? "class ids"
                                            : std::to_string(i.label_width) + " targets");
}

// A reader other than rank 0 must read the very set rank 0 validated (a
// node-local copy of the file may be stale or another one).
void check_same_set(const SetInfo& mine, const SetInfo& rank0, const MpiSession& mpi) {
  const bool same = mine.rows == rank0.rows && mine.dim == rank0.dim &&
                    mine.vocab_size == rank0.vocab_size &&
                    mine.feature_type == rank0.feature_type &&
                    mine.label_type == rank0.label_type && mine.label_width == rank0.label_width;
  DPT_REQUIRE(same, ExitCode::kData,
              mine.file + ": /" + mine.set + " on " + mpi.host() + " holds " + shape_text(mine) +
                  ", but rank 0 sees " + shape_text(rank0) +
                  "; every input reader must see the same set");
}

}  // namespace

SharedSet open_set(const MpiSession& mpi, const std::string& file, const std::string& set,
                   LabelType labels, int outputs, bool reader) {
  SharedSet ds;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    ds.data = std::make_unique<Dataset>(file, set);
    const SetInfo& info = ds.data->info();
    const std::string where = file + ": /" + set + "/labels";
    if (info.tokens()) {
      const std::string tokens = file + ": /" + set + "/tokens";
      DPT_REQUIRE(labels == LabelType::kClass, ExitCode::kUsage,
                  tokens + " is a token set: it trains a language model with --loss xent");
      DPT_REQUIRE(info.vocab_size == static_cast<std::uint64_t>(outputs), ExitCode::kUsage,
                  tokens + " has vocab_size " + std::to_string(info.vocab_size) +
                      " but the model's last layer gives " + std::to_string(outputs) +
                      " outputs per position (end a language model with dense:" +
                      std::to_string(info.vocab_size) + ")");
    } else if (labels == LabelType::kClass) {
      DPT_REQUIRE(info.label_type == LabelType::kClass, ExitCode::kData,
                  where + " holds float targets [N, K]; --loss xent needs integer class ids [N]");
    } else {
      DPT_REQUIRE(info.label_type == LabelType::kTarget, ExitCode::kData,
                  where + " holds integer class ids; --loss mse needs float32 targets [N, K]");
      DPT_REQUIRE(info.label_width == static_cast<std::uint64_t>(outputs), ExitCode::kUsage,
                  where + " has " + std::to_string(info.label_width) +
                      " targets per sample but the model's last dense layer has " +
                      std::to_string(outputs) + " outputs");
    }
    ds.max_label = ds.data->validate(labels == LabelType::kClass ? outputs : 0);
  });
  SetShape s{};
  if (mpi.rank() == 0) {
    const SetInfo& i = ds.data->info();
    s = {i.rows,
         i.dim,
         i.label_width,
         i.chunk_rows,
         i.vocab_size,
         static_cast<std::int32_t>(i.feature_type),
         static_cast<std::int32_t>(i.label_type),
         ds.max_label,
         {},
         static_cast<std::int32_t>(i.feature_shape.size())};
    std::copy(i.feature_shape.begin(), i.feature_shape.end(), s.feature_dims);
  }
  broadcast_value(mpi.world(), s);
  if (mpi.rank() == 0) {
    ds.info = ds.data->info();
  } else {
    ds.info.file = file;
    ds.info.set = set;
    ds.info.rows = s.rows;
    ds.info.dim = s.dim;
    ds.info.label_width = s.label_width;
    ds.info.chunk_rows = s.chunk_rows;
    ds.info.vocab_size = s.vocab_size;
    ds.info.feature_type = static_cast<FeatureType>(s.feature_type);
    ds.info.label_type = static_cast<LabelType>(s.label_type);
    ds.info.feature_shape.assign(s.feature_dims, s.feature_dims + s.feature_rank);
    ds.max_label = s.max_label;
  }
  agree(mpi.world(), [&] {
    if (!reader || mpi.rank() == 0) return;
    ds.data = std::make_unique<Dataset>(file, set);
    check_same_set(ds.data->info(), ds.info, mpi);
  });
  return ds;
}

void check_model_fits(const MpiSession& mpi, const std::vector<LayerSpec>& specs,
                      const SetInfo& info, bool class_labels) {
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    check_model_output(info, model_layout(specs, sample_shape(info), model_vocab(info)).output,
                       class_labels);
  });
}

void check_model_output(const SetInfo& info, const Shape& output, bool class_labels) {
  {
    const std::string where = info.file + ": /" + info.set;
    if (info.tokens()) {
      const int t = static_cast<int>(info.dim), v = static_cast<int>(info.vocab_size);
      const Shape want{t, v};
      DPT_REQUIRE(output == want, ExitCode::kUsage,
                  "--model gives " + output.to_string() + " per sample, but " + where +
                      "/tokens trains a language model: it needs [T, V] = " + want.to_string() +
                      " (dense:" + std::to_string(v) + " on the sequence, last)");
    } else if (class_labels) {
      DPT_REQUIRE(output.rank() != 2, ExitCode::kUsage,
                  "--model gives a sequence " + output.to_string() + " per sample, but " + where +
                      "/labels holds one class id per sample (reduce the sequence first, e.g. "
                      "gap before the last dense)");
    }
  }
}

Shape sample_shape(const SetInfo& info) {
  const auto& f = info.feature_shape;
  auto d = [&](std::size_t i) { return static_cast<int>(f[i]); };
  switch (f.size()) {
    case 2: return Shape{d(1)};               // [N, F]
    case 3: return Shape{1, d(1), d(2)};      // [N, H, W]: one channel
    case 4: return Shape{d(1), d(2), d(3)};   // [N, C, H, W]
    case 5: return Shape{d(1), d(2), d(3), d(4)};  // [N, C, D, H, W]
    default:
      throw Error(ExitCode::kData, info.file + ": /" + info.set + "/features has rank " +
                                       std::to_string(f.size()) + "; need 2 to " +
                                       std::to_string(kMaxFeatureRank));
  }
}

}  // namespace dptrain
