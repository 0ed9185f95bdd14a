// Implements: a set of the data file as every rank knows it: the
// Dataset itself lives on rank 0 only, where it is opened and validated; its
// shape is broadcast so every rank can size its buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dptrain/data/dataset.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/tensor.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace dptrain {

// One set of the data file: the Dataset lives on rank 0 and the other input
// readers; info and the largest class id are known on every rank.
struct SharedSet {
  std::unique_ptr<Dataset> data;  // rank 0 and the other readers only
  SetInfo info;
  std::int64_t max_label = -1;
};

// The stored features' rank limit: [N, C, D, H, W].
inline constexpr std::size_t kMaxFeatureRank = 5;

// The model's per-sample input for a set (docs/design.md section 3): [N, F] is
// {F}, [N, H, W] one channel {1, H, W}, [N, C, H, W] {C, H, W}, [N, C, D, H,
// W] {C, D, H, W}, a token set's windows [N, T+1] the ids {T}. Error(kData)
// for other ranks.
Shape sample_shape(const SetInfo& info);
// The vocabulary a model built for this set reads ids of (0: not a token set).
inline int model_vocab(const SetInfo& info) { return static_cast<int>(info.vocab_size); }

// Checks that a model whose output is `output` per sample can train or be
// evaluated on the set: a token set's model gives [T, V] (V = vocab_size),
// a set of class ids one output row per sample. Error(kUsage) naming the
// file otherwise.
void check_model_output(const SetInfo& info, const Shape& output, bool class_labels);
// Agreed, checked on rank 0 alone (one error line, not one per rank): the
// model `specs` builds for the set's samples and fits it (check_model_output).
void check_model_fits(const MpiSession& mpi, const std::vector<LayerSpec>& specs,
                      const SetInfo& info, bool class_labels);

// Opens and validates file:/set on rank 0 and broadcasts its shape; a rank
// with `reader` set opens it too and checks that it sees the same set (the
// one validation pass stays rank 0's). Agreed: a bad or missing file on any
// rank makes every rank throw AgreedFailure(kData).
SharedSet open_set(const MpiSession& mpi, const std::string& file, const std::string& set,
                   LabelType labels, int outputs, bool reader = false);

// The type a set's features travel in between ranks (Scatter and
// ShardBuffers must agree; InputQueueConfig::raw_features on the reader):
// their stored type, so uint8 moves a quarter and float16/int16 half the
// bytes of float32, and each rank converts its own shard.
inline FeatureType feature_wire(const SetInfo& info) { return info.feature_type; }

}  // namespace dptrain
