// Implements: the training step (see train_step.hpp).
#include "train/train_step.hpp"

#include "dptrain/common/error.hpp"
#include "dptrain/data/rank_split.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "train/buckets.hpp"
#include "train/replica_sum.hpp"

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
// gradients are final after it, and the buckets reduce them as backward
// goes (or one reduction follows it).
void forward_backward(Backend& be, Communicator& comm, Model& model, LossKind loss,
                      const Shard& shard, float scale, float* stats, const StepOptions& o,
                      bool reduce) {
  if (o.replicas) o.replicas->set_phase(o.timer, Phase::kForward);
  const float* out = model.forward(shard.features, shard.rows, o.buckets);
  apply_loss(be, loss, out, shard, model.output_shape(), scale, model.output_grad(), stats);
  lap(o, Phase::kForward);
  if (o.replicas) o.replicas->set_phase(o.timer, Phase::kBackward);
  if (!reduce) {  // nothing to reduce yet; the input pipeline still moves along
    model.backward(shard.features, model.output_grad(), shard.rows,
                   o.buckets ? o.buckets->others() : nullptr);
    lap(o, Phase::kBackward);
    return;
  }
  if (o.buckets) {
    o.buckets->begin_step();
    model.backward(shard.features, model.output_grad(), shard.rows, o.buckets);
    lap(o, Phase::kBackward);
    o.buckets->finish();  // only the part the overlap did not hide
    return;
  }
  model.backward(shard.features, model.output_grad(), shard.rows);
  lap(o, Phase::kBackward);
  if (o.micro_batches > 1) be.add(o.accumulated, model.grads(), model.num_params());
  if (o.shards) {
    comm.start_reduce_scatter_sum(model.grads(), o.shards->bounds.data());
    comm.wait_all();
  } else {
    comm.allreduce_sum(model.grads(), model.num_params());
  }
}

// --accumulate K: micro-batches 0..K-2 summed into o.accumulated, the last
// one's gradients reduced with that sum added (by the buckets, as each
// bucket's layers finish, or before the one reduction).
void accumulate_and_reduce(Backend& be, Communicator& comm, Model& model, LossKind loss,
                           const Shard& shard, std::uint64_t global_rows, float scale,
                           float* stats, const StepOptions& o) {
  DPT_REQUIRE(o.accumulated, ExitCode::kOther, "train_step: --accumulate needs an arena");
  const StepInfo base = model.step();
  const int k_last = o.micro_batches - 1;
  for (int k = 0; k <= k_last; ++k) {
    const RowRange r = rank_rows(static_cast<std::uint64_t>(shard.rows), o.micro_batches, k);
    StepInfo info = base;
    info.first_row = base.first_row + r.first;
    if (base.batch_rows)
      info.batch_rows = global_micro_rows(global_rows, comm.size(), o.micro_batches, k);
    model.set_step(info);
    if (o.buckets) o.buckets->add_before_reducing(&be, k == k_last ? o.accumulated : nullptr);
    forward_backward(be, comm, model, loss, rows_of(shard, model, r), scale, stats, o, k == k_last);
    if (k == 0 && k < k_last)
      be.copy_device(o.accumulated, model.grads(), model.num_params() * sizeof(float));
    else if (k < k_last)
      be.add(model.grads(), o.accumulated, model.num_params());
  }
  model.set_step(base);
}

// Sharded: each rank checks and measures its own slice; one all-reduce of
// two doubles makes the verdict and the norm every rank's.
bool sharded_update(Backend& be, Communicator& comm, Model& model, Optimizer& opt, float lr,
                    const StepOptions& o) {
  const ArenaRange mine = opt.owned();
  const Backend::GradientCheck check =
      be.check_gradients(model.grads() + mine.offset, mine.count, opt.clips());
  double local[2] = {static_cast<double>(check.nonfinite), check.sum_squares};
  double total[2] = {0.0, 0.0};
  DPT_MPI_CHECK(MPI_Allreduce(local, total, 2, MPI_DOUBLE, MPI_SUM, o.shards->world));
  lap(o, Phase::kComm);
  if (total[0] != 0.0) return false;
  opt.step(model.params(), model.grads(), lr, &total[1]);
  lap(o, Phase::kOptimizer);
  comm.allgather(model.params(), o.shards->bounds.data());
  lap(o, Phase::kComm);
  return true;
}

}  // namespace

bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                const StepOptions& o) {
  // Each rank scales by the GLOBAL batch size and the reduction sums, so the
  // result is the exact global mean whatever the shard sizes (even empty).
  // A sequence output's loss is a mean over positions too (B_global · T terms).
  const int terms = loss_terms_per_sample(loss, model.output_shape());
  const float scale = 1.0f / static_cast<float>(global_rows * static_cast<std::uint64_t>(terms));
  if (o.buckets) o.buckets->add_before_reducing(&be, nullptr);
  if (o.micro_batches > 1)
    accumulate_and_reduce(be, comm, model, loss, shard, global_rows, scale, stats, o);
  else
    forward_backward(be, comm, model, loss, shard, scale, stats, o, true);
  lap(o, Phase::kComm);
  if (o.shards) return sharded_update(be, comm, model, opt, lr, o);
  // One read-back: the verdict and, with clipping, the norm.
  const Backend::GradientCheck check =
      be.check_gradients(model.grads(), model.num_params(), opt.clips());
  const bool finite = check.nonfinite == 0;
  if (finite) opt.step(model.params(), model.grads(), lr, &check.sum_squares);
  lap(o, Phase::kOptimizer);
  return finite;
}

}  // namespace dptrain
