// Implements: reading and validating one set of a docs/design.md section 3 data
// file (HDF5, virtual datasets included, or a `.txt` list of HDF5 files
// whose sets are concatenated) on an input reader. Every check names the
// file, the dataset and the first bad index, and throws Error(ExitCode::kData).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/data/feature_types.hpp"
#include "dptrain/model/shard.hpp"

namespace dptrain {

struct SetInfo {
  std::string file, set;
  std::uint64_t rows = 0;                  // N
  std::uint64_t dim = 0;                   // product of the trailing feature dims
  std::vector<std::uint64_t> feature_shape;  // as stored, N first
  FeatureType feature_type = FeatureType::kFloat32;
  LabelType label_type = LabelType::kClass;
  std::uint64_t label_width = 1;           // 1 for class ids, K for targets, T for tokens
  std::uint64_t chunk_rows = 0;            // rows per feature chunk, 0 if contiguous
  // A token set (/<set>/tokens [N, T+1], docs/design.md section 3): its
  // vocabulary; the features are then the ids tokens[:, :T] (FeatureType::
  // kTokenId, feature_shape [N, T]) and the labels, T class ids per row,
  // the next tokens tokens[:, 1:]. 0 for a set of features and labels.
  std::uint64_t vocab_size = 0;
  bool tokens() const { return vocab_size > 0; }
  std::size_t feature_bytes_per_row() const {
    return dim * feature_item_bytes(feature_type);
  }
  std::size_t label_bytes_per_row() const { return label_width * 4; }
};

class Dataset {
 public:
  // Opens file:/set and checks structure (datasets exist, ranks, dtypes,
  // N equal, N > 0, sizes sane, every source of a virtual dataset present;
  // for a list, each file so and all of one layout). Throws Error(kData).
  Dataset(const std::string& file, const std::string& set);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const SetInfo& info() const { return info_; }

  // One streaming pass with bounded memory: class labels in [0, num_classes)
  // (num_classes <= 0: only >= 0 and fit in int32), float features and
  // targets finite, token ids in [0, vocab_size). Returns the largest class
  // id (-1 for targets; vocab_size - 1 for tokens).
  std::int64_t validate(std::int64_t num_classes);

  // Rows [begin, begin + count) as stored: features (feature_bytes_per_row
  // each) and labels (int32 class ids, or float32 targets; label_bytes_per_row
  // each). Either pointer may be null to skip it.
  void read_rows(std::uint64_t begin, std::uint64_t count, void* features, void* labels);

 private:
  void read_token_rows(std::uint64_t begin, std::uint64_t count, void* features, void* labels);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  SetInfo info_;
};

// Names of the groups of a data file holding features+labels or tokens (for inspect).
std::vector<std::string> list_sets(const std::string& file);

}  // namespace dptrain
