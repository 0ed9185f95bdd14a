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

class ReplicatedSync final : public ReducingSync {
 public:
  // buckets: borrowed, null for one all-reduce after backward.
  ReplicatedSync(Backend& be, Communicator& comm, Model& model, GradientBuckets* buckets)
      : ReducingSync(be, comm, model, buckets, {}), be_(be), model_(model) {}
  // Over buckets of its own of about bucket_bytes (0: one).
  ReplicatedSync(Backend& be, Communicator& comm, Model& model, std::size_t bucket_bytes)
      : ReducingSync(be, comm, model, bucket_bytes, {}), be_(be), model_(model) {}

  std::string name() const override { return "replicated"; }
  ArenaRange owned() const override { return {0, model_.num_params()}; }
  bool update(Optimizer& opt, float lr, PhaseTimer* timer) override;

 private:
  Backend& be_;
  Model& model_;
};

}  // namespace dptrain
