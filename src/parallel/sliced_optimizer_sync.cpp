// Implements: the sliced-optimizer-state strategy (see
// src/parallel/sliced_optimizer_sync.hpp).
#include "parallel/sliced_optimizer_sync.hpp"

#include "dptrain/telemetry/metrics.hpp"

namespace dptrain {

SlicedOptimizerSync::SlicedOptimizerSync(Backend& be, Communicator& comm, Model& model,
                                         std::size_t bucket_bytes)
    : ReducingSync(be, comm, model, bucket_bytes, slice_bounds(model.num_params(), comm.size())),
      be_(be),
      comm_(comm),
      model_(model) {}

ArenaRange SlicedOptimizerSync::owned() const {
  const std::vector<std::size_t>& s = reduction_.slices();
  const auto r = static_cast<std::size_t>(comm_.rank());
  return {s[r], s[r + 1] - s[r]};
}

// Each rank checks and measures its own slice; one all-reduce of two
// doubles makes the verdict and the norm every rank's.
bool SlicedOptimizerSync::update(Optimizer& opt, float lr, PhaseTimer* timer) {
  const ArenaRange mine = opt.owned();
  const Backend::GradientCheck check =
      be_.check_gradients(model_.grads() + mine.offset, mine.count, opt.clips());
  double totals[2] = {static_cast<double>(check.nonfinite), check.sum_squares};
  comm_.allreduce_host_sum(totals, 2);
  if (timer) timer->lap(Phase::kComm);
  if (totals[0] != 0.0) return false;
  opt.step(model_.params(), model_.grads(), lr, &totals[1]);
  if (timer) timer->lap(Phase::kOptimizer);
  comm_.allgather(model_.params(), reduction_.slices().data());
  if (timer) timer->lap(Phase::kComm);
  return true;
}

}  // namespace dptrain
