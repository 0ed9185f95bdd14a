// Implements: the training step (see train_step.hpp).
#include "train/train_step.hpp"

#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "train/buckets.hpp"
#include "train/replica_sum.hpp"

namespace dptrain {

bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets, CommReplicaSum* replicas) {
  auto lap = [timer](Phase p) {
    if (timer) timer->lap(p);
  };
  // Each rank scales by the GLOBAL batch size and the all-reduce sums, so the
  // result is the exact global mean whatever the shard sizes (even empty).
  // A sequence output's loss is a mean over positions too (B_global · T terms).
  const int terms = loss_terms_per_sample(loss, model.output_shape());
  const float scale = 1.0f / static_cast<float>(global_rows * static_cast<std::uint64_t>(terms));
  if (replicas) replicas->set_phase(timer, Phase::kForward);
  const float* out = model.forward(shard.features, shard.rows, buckets);
  apply_loss(be, loss, out, shard, model.output_shape(), scale, model.output_grad(), stats);
  lap(Phase::kForward);
  if (replicas) replicas->set_phase(timer, Phase::kBackward);
  if (buckets) {
    buckets->begin_step();
    model.backward(shard.features, model.output_grad(), shard.rows, buckets);
    lap(Phase::kBackward);
    buckets->finish();  // only the part the overlap did not hide
  } else {
    model.backward(shard.features, model.output_grad(), shard.rows);
    lap(Phase::kBackward);
    comm.allreduce_sum(model.grads(), model.num_params());
  }
  lap(Phase::kComm);
  const bool finite = be.count_nonfinite(model.grads(), model.num_params()) == 0;
  if (finite) opt.step(model.params(), model.grads(), lr);
  lap(Phase::kOptimizer);
  return finite;
}

}  // namespace dptrain
