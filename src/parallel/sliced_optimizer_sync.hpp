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

class SlicedOptimizerSync final : public SyncStrategy {
 public:
  // Over buckets of its own of about bucket_bytes (0: one).
  SlicedOptimizerSync(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes);

  std::string name() const override { return "sliced optimizer state"; }
  ArenaRange owned() const override;
  const std::vector<std::size_t>& state_slices() const override { return reduction_.slices(); }

  void begin_backward(bool reduce, const float* earlier) override {
    reduction_.begin_backward(reduce, earlier);
  }
  void between_layers() override { reduction_.between_layers(); }
  void grads_ready(std::size_t begin) override { reduction_.grads_ready(begin); }
  void finish_backward() override { reduction_.finish_backward(); }
  bool update(Optimizer& opt, float lr, PhaseTimer* timer) override;
  void visit_collectives(const CollectiveVisitor& visit) const override {
    reduction_.visit_collectives(visit);
  }

 private:
  Backend& be_;
  Communicator& comm_;
  Model& model_;
  GradientReduction reduction_;
};

}  // namespace dptrain
