// Implements: one synchronized training step (internal): forward, loss
// scaled by 1/B_global, backward, and the update, with the parallel
// strategy (src/parallel/) turning every rank's gradients into one update
// (docs/design.md section 1); as K micro-batches (--accumulate) when asked.
#pragma once

#include <cstdint>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/shard.hpp"
#include "dptrain/parallel/sync_strategy.hpp"
#include "parallel/gradient_buckets.hpp"

namespace dptrain {

class Optimizer;
class PhaseTimer;
class CommReplicaSum;
class StepGraphs;

// What a step is made of besides the model, its shard and the optimizer.
struct StepOptions {
  // How the ranks' gradients become one update; required.
  SyncStrategy* sync = nullptr;
  // Who hears the model's layer events (the strategy, the input pipeline):
  // required, and it must include `sync`.
  LayerListener* events = nullptr;
  PhaseTimer* timer = nullptr;
  // The model's StepInfo::replicas, when it has one, so that its
  // collectives are timed in the phase they interrupt.
  CommReplicaSum* replicas = nullptr;
  // --accumulate K: the shard runs as K micro-batches (rank_rows of it);
  // the gradients of all but the last are summed in `accumulated` (an arena
  // of num_params floats, needed when K > 1) and added to the last one's
  // before its reduction. Every rank runs K forward/backward passes, empty
  // ones included, so that bn's collectives match.
  int micro_batches = 1;
  float* accumulated = nullptr;
  // --cuda-graphs: forward, loss and backward replayed as a graph of
  // `graphs` where it applies (one rank, one micro-batch, a shard with
  // rows); the strategy then reduces after the graph, and the forward
  // phase's time holds the backward's. Null: each call queued as made.
  StepGraphs* graphs = nullptr;
};

// One synchronized step on this rank's shard: forward, loss scaled by
// 1/global_rows, backward, the strategy's reduction, then its update at lr
// unless the reduced gradients hold NaN/Inf. Returns false (and skips the
// update) in that case; every rank returns the same. The model's step() is
// the shard's StepInfo; each micro-batch runs with its own first_row and
// global batch_rows.
bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                const StepOptions& options);

// The plain replicated step of the form the tests and benchmarks use: the
// gradients all-reduced by `buckets` as backward goes (null: one
// all-reduce after it); `also` (e.g. an input pipeline) hears the layer
// events too.
bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets = nullptr,
                CommReplicaSum* replicas = nullptr, LayerListener* also = nullptr,
                StepGraphs* graphs = nullptr);

}  // namespace dptrain
