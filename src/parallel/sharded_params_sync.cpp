// Implements: the sharded-parameters strategy (see
// src/parallel/sharded_params_sync.hpp).
#include "parallel/sharded_params_sync.hpp"

#include <algorithm>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"

namespace dptrain {

ShardedParamsSync::ShardedParamsSync(Backend& be, Communicator& comm, Model& model,
                                     std::uint64_t seed, bool accumulates, bool bf16_gathers)
    : be_(be), comm_(comm), model_(model), slices_(slice_bounds(model.num_params(), comm.size())) {
  DPT_REQUIRE(model.storage() == ModelStorage::kShardedParams, ExitCode::kOther,
              "--shard-params needs a model built with sharded parameters");
  largest_ = model.largest_layer_params();
  for (std::size_t li = 0; li < model.num_layers(); ++li) {
    const ArenaRange unit = model.layer_params(li);
    std::vector<std::size_t>& b = pieces_.emplace_back(slices_.size());
    for (std::size_t r = 0; r < slices_.size(); ++r)
      b[r] = std::clamp(slices_[r], unit.offset, unit.offset + unit.count) - unit.offset;
    if (!bf16_gathers) continue;
    std::vector<std::size_t>& c = packed_.emplace_back(b.size());
    for (std::size_t r = 0; r + 1 < b.size(); ++r) c[r + 1] = c[r] + (b[r + 1] - b[r] + 1) / 2;
    packed_largest_ = std::max(packed_largest_, c.back());
  }
  if (bf16_gathers) {
    convert_ = &be.kernels<ConvertKernels>();
    for (auto& b : unit_packed_) b = DeviceBuffer<float>(be, packed_largest_);
  }
  const ArenaRange mine = owned();
  params_ = DeviceBuffer<float>(be, mine.count);
  grads_ = DeviceBuffer<float>(be, mine.count);
  for (auto& b : unit_params_) b = DeviceBuffer<float>(be, largest_);
  for (auto& b : unit_grads_) b = DeviceBuffer<float>(be, largest_);
  if (accumulates) accumulated_ = DeviceBuffer<float>(be, model.num_params());
  model.init_params(seed, mine, params_.get());
  model.set_param_slice(params_.get());
}

ArenaRange ShardedParamsSync::owned() const {
  const auto r = static_cast<std::size_t>(comm_.rank());
  return {slices_[r], slices_[r + 1] - slices_[r]};
}

std::size_t ShardedParamsSync::neighbour(std::size_t layer, int step) const {
  for (std::size_t li = layer + step; li < model_.num_layers(); li += step)
    if (model_.layer_params(li).count) return li;
  return kNone;
}

void ShardedParamsSync::prefetch(std::size_t layer) {
  if (layer == kNone || holds_[0] == layer || holds_[1] == layer) return;
  // The other buffer than the one bound last: its layer has run.
  const std::size_t i = 1 - last_used_;
  float* buf = unit_params_[i].get();
  const ArenaRange unit = model_.layer_params(layer);
  const std::vector<std::size_t>& b = pieces(layer);
  const auto me = static_cast<std::size_t>(comm_.rank());
  const std::size_t own = b[me + 1] - b[me];  // this rank's piece of the unit
  const float* mine = own ? params_.get() + (unit.offset + b[me] - slices_[me]) : nullptr;
  if (convert_) {  // bf16: the piece rounded into its place in the packed twin
    float* packed = unit_packed_[i].get();
    const std::vector<std::size_t>& c = packed_[layer];
    if (own) convert_->to_bf16(mine, reinterpret_cast<std::uint16_t*>(packed) + 2 * c[me], own);
    comm_.start_allgather(packed, c.data());
  } else {
    if (own) be_.copy_device(buf + b[me], mine, own * sizeof(float));
    comm_.start_allgather(buf, b.data());
  }
  holds_[i] = kNone;
  prefetched_ = layer;
  prefetch_buf_ = i;
}

float* ShardedParamsSync::gathered(std::size_t layer) {
  if (prefetched_ != kNone) {  // complete it: its buffer is about to be used
    comm_.finish_allgather();
    if (convert_) expand(prefetch_buf_, prefetched_);
    holds_[prefetch_buf_] = prefetched_;
    prefetched_ = kNone;
  }
  for (std::size_t i = 0; i < 2; ++i)
    if (holds_[i] == layer) {
      last_used_ = i;
      return unit_params_[i].get();
    }
  prefetch(layer);  // not on its way (the first unit, or out of order): now
  return gathered(layer);
}

void ShardedParamsSync::expand(std::size_t i, std::size_t layer) {
  const std::vector<std::size_t>& b = pieces(layer);
  const std::vector<std::size_t>& c = packed_[layer];
  const auto* packed = reinterpret_cast<const std::uint16_t*>(unit_packed_[i].get());
  for (std::size_t r = 0; r + 1 < b.size(); ++r)
    if (b[r + 1] > b[r])
      convert_->from_bf16(packed + 2 * c[r], unit_params_[i].get() + b[r], b[r + 1] - b[r]);
}

void ShardedParamsSync::before_forward(std::size_t layer) {
  const ArenaRange unit = model_.layer_params(layer);
  if (unit.count == 0) return;
  model_.bind_layer(layer, arena_base(gathered(layer), unit.offset),
                    arena_base(unit_grads_[pending_buf_].get(), unit.offset));
  prefetch(neighbour(layer, 1));
}

void ShardedParamsSync::before_backward(std::size_t layer) {
  const ArenaRange unit = model_.layer_params(layer);
  if (unit.count == 0) return;
  flush_pending();
  float* params = gathered(layer);
  // The buffer not in flight (a rank with an empty shard: the model zeroes it).
  pending_buf_ = in_flight_ == kNone ? 0 : 1 - in_flight_buf_;
  model_.bind_layer(layer, arena_base(params, unit.offset),
                    arena_base(unit_grads_[pending_buf_].get(), unit.offset));
  pending_ = layer;
  prefetch(neighbour(layer, -1));
}

// The first layer with parameters starts the arena: its gradient is the
// pass's last (with rows, or every layer's at once on an empty shard).
void ShardedParamsSync::grads_ready(std::size_t begin) {
  if (begin == 0) flush_pending();
}

void ShardedParamsSync::flush_pending() {
  if (pending_ == kNone) return;
  const ArenaRange unit = model_.layer_params(pending_);
  float* grads = unit_grads_[pending_buf_].get();
  float* sum = accumulated_.get() ? accumulated_.get() + unit.offset : nullptr;
  if (!reduce_) {  // a micro-batch before the last: sum, as train_step sums an arena
    if (earlier_passes_ == 1) be_.copy_device(sum, grads, unit.count * sizeof(float));
    else be_.add(grads, sum, unit.count);
    pending_ = kNone;
    return;
  }
  if (earlier_passes_ > 0) be_.add(sum, grads, unit.count);
  complete_in_flight();  // at most one in flight: its buffer is the next unit's
  const std::vector<std::size_t>& b = pieces(pending_);
  comm_.start_reduce_scatter_sum(grads, b.data());
  in_flight_ = pending_;
  in_flight_buf_ = pending_buf_;
  pending_ = kNone;
}

void ShardedParamsSync::complete_in_flight() {
  if (in_flight_ == kNone) return;
  comm_.wait_all();
  const ArenaRange unit = model_.layer_params(in_flight_);
  const std::vector<std::size_t>& b = pieces(in_flight_);
  const auto me = static_cast<std::size_t>(comm_.rank());
  if (b[me + 1] > b[me])
    be_.copy_device(grads_.get() + (unit.offset + b[me] - slices_[me]),
                    unit_grads_[in_flight_buf_].get() + b[me], (b[me + 1] - b[me]) * sizeof(float));
  in_flight_ = kNone;
}

// `earlier` is the trainer's arena, which a model without a gradient arena
// never fills: this strategy sums the micro-batches itself.
void ShardedParamsSync::begin_backward(bool reduce, const float*) {
  DPT_REQUIRE(reduce || accumulated_.get(), ExitCode::kOther,
              "--shard-params: a micro-batch without an accumulation arena");
  reduce_ = reduce;
  if (!reduce) ++earlier_passes_;
  pending_ = in_flight_ = kNone;
}

void ShardedParamsSync::finish_backward() {
  flush_pending();
  complete_in_flight();
  earlier_passes_ = 0;
}

// As SlicedOptimizerSync::update, on the slices themselves; the next
// forward gathers the new values.
bool ShardedParamsSync::update(Optimizer& opt, float lr, PhaseTimer* timer) {
  const ArenaRange mine = opt.owned();
  const Backend::GradientCheck check = be_.check_gradients(grads_.get(), mine.count, opt.clips());
  double totals[2] = {static_cast<double>(check.nonfinite), check.sum_squares};
  comm_.allreduce_host_sum(totals, 2);
  if (timer) timer->lap(Phase::kComm);
  if (totals[0] != 0.0) return false;
  if (prefetched_ != kNone) comm_.finish_allgather();  // none is left by a pass; to be sure
  prefetched_ = kNone;
  opt.step(arena_base(params_.get(), mine.offset), arena_base(grads_.get(), mine.offset), lr,
           &totals[1]);
  holds_ = {kNone, kNone};
  if (timer) timer->lap(Phase::kOptimizer);
  return true;
}

}  // namespace dptrain
