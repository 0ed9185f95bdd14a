// Implements: the replicated strategy (docs/design.md section 1), plain
// data parallelism: every rank keeps all parameters, gradients and
// optimizer state; the gradient arena is all-reduced (bucket by bucket,
// overlapped with backward) and every rank applies the same whole update
// (internal to parallel/ and the step; tests and benchmarks make it
// directly).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dptrain/parallel/sync_strategy.hpp"
#include "parallel/gradient_reduction.hpp"

namespace dptrain {

class ReplicatedSync final : public SyncStrategy {
 public:
  // buckets: borrowed, null for one all-reduce after backward.
  ReplicatedSync(Backend& be, Communicator& comm, Model& model, GradientBuckets* buckets)
      : be_(be), model_(model), reduction_(be, comm, model, buckets, {}) {}
  // Over buckets of its own of about bucket_bytes (0: one).
  ReplicatedSync(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes)
      : be_(be), model_(model), reduction_(be, comm, model, bucket_bytes, {}) {}

  std::string name() const override { return "replicated"; }
  ArenaRange owned() const override { return {0, model_.num_params()}; }
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
  Model& model_;
  GradientReduction reduction_;
};

}  // namespace dptrain
