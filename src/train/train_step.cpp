// Implements: the training step (see train_step.hpp).
#include "train/train_step.hpp"

#include "dptrain/common/error.hpp"
#include "dptrain/data/rank_split.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "parallel/replicated_sync.hpp"
#include "train/replica_sum.hpp"
#include "train/step_graphs.hpp"

namespace dptrain {
namespace {

void lap(const StepOptions& o, Phase p) {
  if (o.timer) o.timer->lap(p);
}

// Rows [r.first, r.first + r.count) of a shard, as a shard of its own.
Shard rows_of(const Shard& s, const Model& model, RowRange r) {
  const auto first = static_cast<std::size_t>(r.first);
  Shard m;
  m.rows = static_cast<int>(r.count);
  m.features = s.features + first * static_cast<std::size_t>(model.input_dim());
  if (s.labels) m.labels = s.labels + first * static_cast<std::size_t>(model.output_positions());
  if (s.targets) m.targets = s.targets + first * static_cast<std::size_t>(model.output_dim());
  return m;  // raw: the pipeline's, never read past it
}

// The rows of micro-batch k over all ranks: what bn normalizes it by.
std::uint64_t global_micro_rows(std::uint64_t global_rows, int ranks, int micro_batches, int k) {
  std::uint64_t rows = 0;
  for (int r = 0; r < ranks; ++r)
    rows += rank_rows(rank_rows(global_rows, ranks, r).count, micro_batches, k).count;
  return rows;
}

// Forward, loss and backward of one (micro-)batch. With reduce: the
// strategy reduces the gradients as backward goes, and they are final after
// finish_backward.
void forward_backward(Backend& be, Model& model, LossKind loss, const Shard& shard, float scale,
                      float* stats, const StepOptions& o, bool reduce, const float* earlier) {
  if (o.replicas) o.replicas->set_phase(o.timer, Phase::kForward);
  const float* out = model.forward(shard.features, shard.rows, o.events);
  apply_loss(be, loss, out, shard, model.output_shape(), scale, model.output_grad(), stats,
             model.output_grad_bf16(), model.output_bf16());
  lap(o, Phase::kForward);
  if (o.replicas) o.replicas->set_phase(o.timer, Phase::kBackward);
  o.sync->begin_backward(reduce, earlier);
  model.backward(shard.features, model.output_grad(), shard.rows, o.events,
                 model.output_grad_bf16());
  lap(o, Phase::kBackward);
  if (reduce) o.sync->finish_backward();
}

// Forward, loss and backward as a graph (--cuda-graphs; step_graphs.hpp),
// then the strategy's reduction; false, having done nothing, where the
// caller runs the pass itself. One rank: the sum over replicas (bn) is the
// shard's own, so the pass runs without it and without the layer events,
// which would reduce during backward.
bool graphed_forward_backward(Backend& be, Communicator& comm, Model& model, LossKind loss,
                              const Shard& shard, float scale, float* stats,
                              const StepOptions& o) {
  if (!o.graphs || !o.graphs->active() || o.micro_batches > 1 || comm.size() != 1 ||
      shard.rows == 0 || !o.sync->passes_without_events())
    return false;
  const StepInfo step = model.step();
  StepInfo alone = step;
  alone.replicas = nullptr;
  model.set_step(alone);
  model.stage_step();
  const StepGraphKey key{shard.features, shard.labels, shard.targets, stats, shard.rows, scale};
  const bool replayed = o.graphs->run(key, [&] {
    const float* out = model.forward(shard.features, shard.rows);
    apply_loss(be, loss, out, shard, model.output_shape(), scale, model.output_grad(), stats,
               model.output_grad_bf16(), model.output_bf16());
    model.backward(shard.features, model.output_grad(), shard.rows, nullptr,
                   model.output_grad_bf16());
  });
  model.set_step(step);
  if (!replayed) return false;
  lap(o, Phase::kForward);
  o.events->between_layers();  // the input pipeline moves on
  o.sync->begin_backward(true, nullptr);
  o.sync->grads_ready(0);
  lap(o, Phase::kBackward);
  o.sync->finish_backward();
  return true;
}

// --accumulate K: micro-batches 0..K-2 summed into o.accumulated, the last
// one's gradients reduced with that sum added (by the strategy, as each part
// of the arena is final, or before its one reduction).
void accumulate_and_reduce(Backend& be, Communicator& comm, Model& model, LossKind loss,
                           const Shard& shard, std::uint64_t global_rows, float scale,
                           float* stats, const StepOptions& o) {
  // A model without a gradient arena (--shard-params): the strategy sums.
  float* grads = model.grads();
  DPT_REQUIRE(o.accumulated || !grads, ExitCode::kOther, "train_step: --accumulate needs an arena");
  const StepInfo base = model.step();
  const int k_last = o.micro_batches - 1;
  for (int k = 0; k <= k_last; ++k) {
    const RowRange r = rank_rows(static_cast<std::uint64_t>(shard.rows), o.micro_batches, k);
    StepInfo info = base;
    info.first_row = base.first_row + r.first;
    if (base.batch_rows)
      info.batch_rows = global_micro_rows(global_rows, comm.size(), o.micro_batches, k);
    model.set_step(info);
    forward_backward(be, model, loss, rows_of(shard, model, r), scale, stats, o, k == k_last,
                     o.accumulated);
    if (!grads) continue;
    if (k == 0 && k < k_last)
      be.copy_device(o.accumulated, grads, model.num_params() * sizeof(float));
    else if (k < k_last)
      be.add(grads, o.accumulated, model.num_params());
  }
  model.set_step(base);
}

}  // namespace

bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                const StepOptions& o) {
  DPT_REQUIRE(o.sync && o.events, ExitCode::kOther, "train_step: needs a strategy and its events");
  // Each rank scales by the GLOBAL batch size and the reduction sums, so the
  // result is the exact global mean whatever the shard sizes (even empty).
  // A sequence output's loss is a mean over positions too (B_global · T terms).
  const int terms = loss_terms_per_sample(loss, model.output_shape());
  const float scale = 1.0f / static_cast<float>(global_rows * static_cast<std::uint64_t>(terms));
  if (o.micro_batches > 1)
    accumulate_and_reduce(be, comm, model, loss, shard, global_rows, scale, stats, o);
  else if (!graphed_forward_backward(be, comm, model, loss, shard, scale, stats, o))
    forward_backward(be, model, loss, shard, scale, stats, o, true, nullptr);
  lap(o, Phase::kComm);
  return o.sync->update(opt, lr, o.timer);
}

bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets, CommReplicaSum* replicas,
                LayerListener* also, StepGraphs* graphs) {
  ReplicatedSync sync(be, comm, model, buckets);
  LayerEvents events{&sync, also};
  StepOptions o;
  o.sync = &sync;
  o.events = &events;
  o.timer = timer;
  o.replicas = replicas;
  o.graphs = graphs;
  return train_step(be, comm, model, opt, loss, shard, global_rows, lr, stats, o);
}

}  // namespace dptrain
