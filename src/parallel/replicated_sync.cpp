// Implements: the replicated strategy's update (see
// src/parallel/replicated_sync.hpp).
#include "parallel/replicated_sync.hpp"

#include "dptrain/telemetry/metrics.hpp"

namespace dptrain {

bool ReplicatedSync::update(Optimizer& opt, float lr, PhaseTimer* timer) {
  // One read-back: the verdict and, with clipping, the norm.
  const Backend::GradientCheck check =
      be_.check_gradients(model_.grads(), model_.num_params(), opt.clips());
  const bool finite = check.nonfinite == 0;
  if (finite) opt.step(model_.params(), model_.grads(), lr, &check.sum_squares);
  if (timer) timer->lap(Phase::kOptimizer);
  return finite;
}

}  // namespace dptrain
