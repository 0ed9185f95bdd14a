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
  // Where the optimizer updates the whole arena, its pass writes the
  // model's bf16 twin too (where the model keeps one).
  if (finite) {
    float* w = model_.params();
    const bool whole = opt.owned().count == model_.num_params();
    opt.step(w, model_.grads(), lr, &check.sum_squares,
             whole ? model_.params_bf16_for_update() : nullptr);
  }
  if (timer) timer->lap(Phase::kOptimizer);
  return finite;
}

}  // namespace dptrain
