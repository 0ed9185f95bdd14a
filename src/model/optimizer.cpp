// Implements: optimizer and schedule names, the Optimizer (state arenas plus
// one fused backend update per step) and the learning-rate schedules.
#include "dptrain/model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw_bad_choice("optimizer", name, "sgd, adam, adamw");
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "cosine") return LrScheduleKind::kCosine;
  if (name == "step") return LrScheduleKind::kStep;
  throw_bad_choice("lr-schedule", name, "constant, cosine, step");
}

bool parse_decay_all(const std::string& name) {
  if (name == "matrices") return false;
  if (name != "all") throw_bad_choice("weight-decay-params", name, "all, matrices");
  return true;
}

std::vector<ArenaRange> matrices_decay_ranges(const std::vector<ParamInfo>& layout) {
  std::vector<ArenaRange> ranges;
  for (const ParamInfo& p : layout) {
    if (p.shape.size() < 2 || p.count == 0) continue;
    if (!ranges.empty() && ranges.back().offset + ranges.back().count == p.offset)
      ranges.back().count += p.count;
    else
      ranges.push_back({p.offset, p.count});
  }
  return ranges;
}

namespace {

// [0, n) cut at the edges of the decayed ranges (sorted, inside [0, n)).
std::vector<std::pair<ArenaRange, bool>> decay_segments(const OptimizerConfig& cfg,
                                                        std::size_t n) {
  std::vector<std::pair<ArenaRange, bool>> out;
  if (cfg.decay_all || cfg.weight_decay == 0.0f) {
    out.push_back({{0, n}, true});
    return out;
  }
  std::size_t at = 0;
  for (const ArenaRange& r : cfg.decay_ranges) {
    DPT_REQUIRE(r.offset >= at && r.offset + r.count <= n, ExitCode::kOther,
                "weight-decay ranges out of order or outside the arena");
    if (r.offset > at) out.push_back({{at, r.offset - at}, false});
    out.push_back({r, true});
    at = r.offset + r.count;
  }
  if (at < n) out.push_back({{at, n - at}, false});
  return out;
}

}  // namespace

std::vector<std::size_t> slice_bounds(std::size_t n, int parts) {
  DPT_REQUIRE(parts >= 1, ExitCode::kOther, "slice_bounds: parts must be >= 1");
  const auto p = static_cast<std::size_t>(parts);
  std::vector<std::size_t> bounds(p + 1, 0);
  for (std::size_t r = 0; r < p; ++r) bounds[r + 1] = bounds[r] + n / p + (r < n % p ? 1 : 0);
  return bounds;
}

Optimizer::Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n)
    : Optimizer(backend, cfg, n, ArenaRange{0, n}) {}

Optimizer::Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n, ArenaRange owned)
    : be_(backend), cfg_(cfg), n_(n), owned_(owned) {
  DPT_REQUIRE(owned_.offset + owned_.count <= n_, ExitCode::kOther,
              "optimizer slice outside the parameter arena");
  DPT_REQUIRE(cfg_.clip_grad_norm >= 0.0f, ExitCode::kUsage, "--clip-grad-norm must be >= 0");
  // The decay segments of the arena, cut to the owned slice.
  const std::size_t lo = owned_.offset, hi = owned_.offset + owned_.count;
  for (const auto& [range, decay] : decay_segments(cfg_, n_)) {
    const std::size_t b = std::max(lo, range.offset), e = std::min(hi, range.offset + range.count);
    if (b < e) segments_.push_back({{b, e - b}, decay});
  }
  const std::size_t n_state = owned_.count;
  // The same checks torch.optim makes, so a bad config fails before step 1.
  DPT_REQUIRE(cfg_.weight_decay >= 0.0f, ExitCode::kUsage, "--weight-decay must be >= 0");
  if (cfg_.kind == OptimizerKind::kSgd) {
    DPT_REQUIRE(cfg_.momentum >= 0.0f, ExitCode::kUsage, "--momentum must be >= 0");
    DPT_REQUIRE(!cfg_.nesterov || cfg_.momentum > 0.0f, ExitCode::kUsage,
                "--nesterov needs --momentum > 0");
    if (cfg_.momentum > 0.0f) s1_ = DeviceBuffer<float>(be_, n_state);
  } else {
    DPT_REQUIRE(cfg_.beta1 >= 0.0f && cfg_.beta1 < 1.0f, ExitCode::kUsage,
                "--beta1 must be in [0, 1)");
    DPT_REQUIRE(cfg_.beta2 >= 0.0f && cfg_.beta2 < 1.0f, ExitCode::kUsage,
                "--beta2 must be in [0, 1)");
    DPT_REQUIRE(cfg_.eps >= 0.0f, ExitCode::kUsage, "--eps must be >= 0");
    s1_ = DeviceBuffer<float>(be_, n_state);
    s2_ = DeviceBuffer<float>(be_, n_state);
  }
}

double Optimizer::local_sum_squares(const float* g) const {
  return owned_.count ? be_.kernels<OptimizerKernels>().sum_squares(g + owned_.offset, owned_.count)
                      : 0.0;
}

int state_arrays_of(const OptimizerConfig& cfg) {
  if (cfg.kind != OptimizerKind::kSgd) return 2;
  return cfg.momentum > 0.0f ? 1 : 0;
}

int Optimizer::state_arrays() const { return state_arrays_of(cfg_); }

// torch.nn.utils.clip_grad_norm_ (1.13): the norm in float, the coefficient
// max_norm / (norm + 1e-6) in float, clamped to 1 (a product by 1 changes
// nothing, so it is skipped). Only the owned slice is scaled: it is all this
// optimizer reads.
void Optimizer::clip(float* g, const double* total_sum_squares) {
  grad_norm_ = 0.0f;
  if (cfg_.clip_grad_norm <= 0.0f) return;
  const double sum = total_sum_squares ? *total_sum_squares : local_sum_squares(g);
  grad_norm_ = static_cast<float>(std::sqrt(sum));
  const float coef = cfg_.clip_grad_norm / (grad_norm_ + 1e-6f);
  if (coef < 1.0f && owned_.count)
    be_.kernels<OptimizerKernels>().scale(g + owned_.offset, coef, owned_.count);
}

void Optimizer::step(float* w, float* g, float lr, const double* total_sum_squares,
                     std::uint16_t* w16) {
  ++step_count_;
  clip(g, total_sum_squares);
  for (const Segment& s : segments_) {
    const std::size_t at = s.range.offset, count = s.range.count;
    const std::size_t state_at = at - owned_.offset;
    const float wd = s.decay ? cfg_.weight_decay : 0.0f;
    if (cfg_.kind == OptimizerKind::kSgd) {
      SgdParams p;
      p.lr = lr;
      p.momentum = cfg_.momentum;
      p.nesterov = cfg_.nesterov;
      p.weight_decay = wd;
      be_.kernels<OptimizerKernels>().sgd_step(w + at, w16 ? w16 + at : nullptr, g + at,
                                               s1_.get() ? s1_.get() + state_at : nullptr, count,
                                               p);
      continue;
    }
    AdamParams p;
    p.lr = lr;
    p.beta1 = cfg_.beta1;
    p.beta2 = cfg_.beta2;
    p.eps = cfg_.eps;
    p.weight_decay = wd;
    p.decoupled = cfg_.kind == OptimizerKind::kAdamW;
    p.step = step_count_;
    be_.kernels<OptimizerKernels>().adam_step(w + at, w16 ? w16 + at : nullptr, g + at,
                                              s1_.get() + state_at, s2_.get() + state_at, count,
                                              p);
  }
}

std::vector<Optimizer::State> Optimizer::state() {
  std::vector<State> out;
  if (cfg_.kind == OptimizerKind::kSgd) {
    if (s1_.get()) out.push_back({"velocity", s1_.get()});
  } else {
    out.push_back({"m", s1_.get()});
    out.push_back({"v", s2_.get()});
  }
  return out;
}

float learning_rate(const LrScheduleConfig& cfg, std::int64_t step) {
  const double base = cfg.base_lr;
  step = std::max<std::int64_t>(0, step);
  if (step < cfg.warmup_steps)
    return static_cast<float>(base * static_cast<double>(step + 1) /
                              static_cast<double>(cfg.warmup_steps));
  const std::int64_t t = step - std::max<std::int64_t>(0, cfg.warmup_steps);
  switch (cfg.kind) {
    case LrScheduleKind::kConstant:
      return static_cast<float>(base);
    case LrScheduleKind::kCosine: {
      const std::int64_t total = cfg.total_steps - std::max<std::int64_t>(0, cfg.warmup_steps);
      if (total <= 0) return static_cast<float>(base);
      const double frac = static_cast<double>(std::min(t, total)) / static_cast<double>(total);
      const double lo = cfg.min_lr;
      return static_cast<float>(lo + (base - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * frac)));
    }
    case LrScheduleKind::kStep: {
      if (cfg.step_size <= 0) return static_cast<float>(base);
      return static_cast<float>(
          base * std::pow(static_cast<double>(cfg.gamma), static_cast<double>(t / cfg.step_size)));
    }
  }
  return static_cast<float>(base);
}

}  // namespace dptrain
