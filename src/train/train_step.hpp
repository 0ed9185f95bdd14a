// Implements: one synchronized training step (internal): forward, loss
// scaled by 1/B_global, backward with bucketed gradient reductions, then the
// optimizer step that every rank applies alike (docs/design.md section 1);
// as K micro-batches (--accumulate) and with the optimizer state sharded
// (--shard-optimizer) when asked.
#pragma once

#include <cstdint>
#include <vector>

#include <mpi.h>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/shard.hpp"

namespace dptrain {

class Optimizer;
class PhaseTimer;
class GradientBuckets;
class CommReplicaSum;

// --shard-optimizer (ZeRO stage 1): the gradient arena is reduce-scattered
// so that rank r holds the sum of its slice [bounds[r], bounds[r+1]), its
// optimizer updates that slice of the parameters, and the parameters are
// all-gathered. `world` carries the one small all-reduce of the step (the
// non-finite count and the squared gradient norm of each slice).
struct GradientShards {
  std::vector<std::size_t> bounds;  // shard_bounds(num_params, ranks)
  MPI_Comm world = MPI_COMM_NULL;
};

// What a step may add to the plain one; all optional.
struct StepOptions {
  PhaseTimer* timer = nullptr;
  // The bucketed reductions, overlapped with backward (and moved along
  // between layers of forward); null: one reduction after backward.
  GradientBuckets* buckets = nullptr;
  // The model's StepInfo::replicas, when it has one, so that its
  // collectives are timed in the phase they interrupt.
  CommReplicaSum* replicas = nullptr;
  const GradientShards* shards = nullptr;  // null: every rank updates the whole arena
  // --accumulate K: the shard runs as K micro-batches (rank_rows of it);
  // the gradients of all but the last are summed in `accumulated` (an arena
  // of num_params floats, needed when K > 1) and added to the last one's
  // before its reduction. Every rank runs K forward/backward passes, empty
  // ones included, so that bn's collectives match.
  int micro_batches = 1;
  float* accumulated = nullptr;
};

// One synchronized step on this rank's shard: forward, loss scaled by
// 1/global_rows, backward, SUM over ranks of the gradient arena, then the
// optimizer step at lr unless the reduced gradients hold NaN/Inf. Returns
// false (and skips the update) in that case; every rank sees the same
// reduced gradients (or, sharded, agrees on their count), so every rank
// returns the same. The model's step() is the shard's StepInfo; each
// micro-batch runs with its own first_row and global batch_rows.
bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                const StepOptions& options);

// The plain step of the form the tests and benchmarks use.
inline bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt,
                       LossKind loss, const Shard& shard, std::uint64_t global_rows, float lr,
                       float* stats, PhaseTimer* timer, GradientBuckets* buckets = nullptr,
                       CommReplicaSum* replicas = nullptr) {
  StepOptions o;
  o.timer = timer;
  o.buckets = buckets;
  o.replicas = replicas;
  return train_step(be, comm, model, opt, loss, shard, global_rows, lr, stats, o);
}

}  // namespace dptrain
