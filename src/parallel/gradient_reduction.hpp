// Implements: the part that strategies summing gradients share (internal to
// parallel/): the gradient arena summed over ranks, bucket by bucket while
// backward finishes layers (when given buckets) or in one operation after
// it; all-reduced, or reduce-scattered to the ranks' slices when given
// slice bounds; with --accumulate's earlier micro-batches added to each
// part just before its reduction starts.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/parallel/sync_strategy.hpp"
#include "parallel/gradient_buckets.hpp"

namespace dptrain {

class GradientReduction {
 public:
  // buckets: null for one reduction after backward. slices: P + 1 bounds
  // (reduce-scatter: rank r ends with the sum of its slice) or empty
  // (all-reduce: every rank ends with the whole sum).
  GradientReduction(Backend& be, Communicator& comm, Model& model, GradientBuckets* buckets,
                    std::vector<std::size_t> slices);
  // The same over buckets of its own, planned from the model's layers.
  GradientReduction(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes,
                    std::vector<std::size_t> slices);

  // SyncStrategy's calls and events, passed on to it.
  void begin_backward(bool reduce, const float* earlier);
  void between_layers();
  void grads_ready(std::size_t begin);
  void finish_backward();
  void visit_collectives(const SyncStrategy::CollectiveVisitor& visit) const;

  const std::vector<std::size_t>& slices() const { return slices_; }

 private:
  Backend& be_;
  Communicator& comm_;
  Model& model_;
  std::unique_ptr<GradientBuckets> own_buckets_;
  GradientBuckets* buckets_;
  std::vector<std::size_t> slices_;
  const float* earlier_ = nullptr;
  bool reducing_ = false;  // inside a backward whose gradients are reduced
};

// A strategy whose gradients are summed by a GradientReduction: the calls
// and events of the backward pass handed to it; a subclass adds its name,
// what it owns and its update.
class ReducingSync : public SyncStrategy {
 public:
  const std::vector<std::size_t>& state_slices() const override { return reduction_.slices(); }
  void begin_backward(bool reduce, const float* earlier) override {
    reduction_.begin_backward(reduce, earlier);
  }
  bool passes_without_events() const override { return true; }
  void between_layers() override { reduction_.between_layers(); }
  void grads_ready(std::size_t begin) override { reduction_.grads_ready(begin); }
  void finish_backward() override { reduction_.finish_backward(); }
  void visit_collectives(const CollectiveVisitor& visit) const override {
    reduction_.visit_collectives(visit);
  }

 protected:
  ReducingSync(Backend& be, Communicator& comm, Model& model, GradientBuckets* buckets,
               std::vector<std::size_t> slices)
      : reduction_(be, comm, model, buckets, std::move(slices)) {}
  ReducingSync(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes,
               std::vector<std::size_t> slices)
      : reduction_(be, comm, model, bucket_bytes, std::move(slices)) {}
  GradientReduction reduction_;
};

}  // namespace dptrain
