// Implements: forward passes over a set, and evaluation (see evaluate.hpp).
#include "dptrain/train/evaluate.hpp"

#include <algorithm>
#include <memory>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/sample_order.hpp"
#include "dptrain/data/scatter.hpp"
#include "dptrain/data/shard_transfer.hpp"

namespace dptrain {

std::uint64_t forward_pass(const MpiSession& mpi, Backend& be, SharedSet& set, Model& model,
                           LossKind loss, std::uint64_t batch_size, std::size_t cache_bytes,
                           const BatchOutputs& on_batch, LayerListener* events,
                           std::uint64_t max_batches) {
  const BatchPlan plan(set.info.rows, batch_size);
  const std::uint64_t batches = max_batches > 0 ? std::min(max_batches, plan.steps_per_epoch())
                                                : plan.steps_per_epoch();
  const FeatureType wire = feature_wire(set.info);
  std::unique_ptr<InputQueue> queue;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    InputQueueConfig qc;
    qc.batch_size = batch_size;
    qc.shuffle.mode = ShuffleMode::kNone;
    qc.first_step = 0;
    qc.end_step = batches;
    qc.cache_bytes = cache_bytes;
    qc.raw_features = true;
    queue = std::make_unique<InputQueue>(*set.data, qc);
  });
  ShardBuffers shard(be, max_shard_rows(batch_size, mpi.size()), set.info.dim,
                     set.info.label_width, label_type(loss), 0, wire);
  Scatter scatter(mpi.world(), set.info.dim, set.info.label_width, class_labels(loss), wire);
  std::uint64_t samples = 0;
  for (std::uint64_t s = 0; s < batches; ++s) {
    const BatchSlot slot = plan.slot(s);
    samples += slot.rows;
    const Shard& dev = next_shard(queue.get(), scatter, slot.rows, shard);
    const float* out = dev.rows > 0 || events
                           ? model.forward(dev.features, dev.rows, events, Mode::kEval)
                           : nullptr;
    if (dev.rows == 0) out = nullptr;
    on_batch(slot, dev, out);
  }
  return samples;
}

EvalResult evaluate(const MpiSession& mpi, Backend& be, Communicator& comm, SharedSet& set,
                    Model& model, LossKind loss, std::uint64_t batch_size, std::size_t cache_bytes,
                    LayerListener* events, std::uint64_t max_batches) {
  DeviceBuffer<float> stats(be, 2);
  EvalResult r;
  r.samples = forward_pass(
      mpi, be, set, model, loss, batch_size, cache_bytes,
      [&](const BatchSlot&, const Shard& shard, const float* out) {
        apply_loss(be, loss, out, shard, model.output_shape(), 0.0f, nullptr, stats.get(),
                   nullptr, model.output_bf16());
      },
      events, max_batches);
  r.whole_set = r.samples == set.info.rows;
  comm.allreduce_sum(stats.get(), 2);
  float host[2] = {0, 0};
  be.copy_to_host(host, stats.get(), sizeof host);
  // Per position on a sequence output (per token of a language model).
  const double terms = static_cast<double>(r.samples) *
                       loss_terms_per_sample(loss, model.output_shape());
  r.loss = static_cast<double>(host[0]) / terms;
  r.accuracy = static_cast<double>(host[1]) / terms;
  return r;
}

}  // namespace dptrain
