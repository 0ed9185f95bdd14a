// Implements: the sliced-optimizer-state strategy, --shard-optimizer (ZeRO
// stage 1; docs/design.md section 1). The arena is cut into P balanced
// slices (slice_bounds); each gradient bucket is reduce-scattered as
// backward finishes it, so rank r ends with the summed gradients of slice r;
// one all-reduce of two doubles (the slices' NaN/Inf counts and squared
// norms) gives every rank the same verdict and clipping norm; rank r's
// optimizer keeps the state of slice r alone and updates that slice of the
// parameters; an all-gather gives every rank every slice again (internal
// to parallel/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dptrain/parallel/sync_strategy.hpp"
#include "parallel/gradient_reduction.hpp"

namespace dptrain {

class SlicedOptimizerSync final : public ReducingSync {
 public:
  // Over buckets of its own of about bucket_bytes (0: one).
  SlicedOptimizerSync(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes);

  std::string name() const override { return "sliced optimizer state"; }
  ArenaRange owned() const override;
  bool update(Optimizer& opt, float lr, PhaseTimer* timer) override;

 private:
  Backend& be_;
  Communicator& comm_;
  Model& model_;
};

}  // namespace dptrain
