// Implements: optimizer and schedule names, the Optimizer (state arenas plus
// one fused backend update per step) and the learning-rate schedules.
#include "dptrain/model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

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

Optimizer::Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n)
    : be_(backend), cfg_(cfg), n_(n) {
  // The same checks torch.optim makes, so a bad config fails before step 1.
  DPT_REQUIRE(cfg_.weight_decay >= 0.0f, ExitCode::kUsage, "--weight-decay must be >= 0");
  if (cfg_.kind == OptimizerKind::kSgd) {
    DPT_REQUIRE(cfg_.momentum >= 0.0f, ExitCode::kUsage, "--momentum must be >= 0");
    DPT_REQUIRE(!cfg_.nesterov || cfg_.momentum > 0.0f, ExitCode::kUsage,
                "--nesterov needs --momentum > 0");
    if (cfg_.momentum > 0.0f) s1_ = DeviceBuffer<float>(be_, n_);
  } else {
    DPT_REQUIRE(cfg_.beta1 >= 0.0f && cfg_.beta1 < 1.0f, ExitCode::kUsage,
                "--beta1 must be in [0, 1)");
    DPT_REQUIRE(cfg_.beta2 >= 0.0f && cfg_.beta2 < 1.0f, ExitCode::kUsage,
                "--beta2 must be in [0, 1)");
    DPT_REQUIRE(cfg_.eps >= 0.0f, ExitCode::kUsage, "--eps must be >= 0");
    s1_ = DeviceBuffer<float>(be_, n_);
    s2_ = DeviceBuffer<float>(be_, n_);
  }
}

void Optimizer::step(float* w, const float* g, float lr) {
  ++step_count_;
  if (cfg_.kind == OptimizerKind::kSgd) {
    SgdParams p;
    p.lr = lr;
    p.momentum = cfg_.momentum;
    p.nesterov = cfg_.nesterov;
    p.weight_decay = cfg_.weight_decay;
    be_.optimizers().sgd_step(w, g, s1_.get(), n_, p);
    return;
  }
  AdamParams p;
  p.lr = lr;
  p.beta1 = cfg_.beta1;
  p.beta2 = cfg_.beta2;
  p.eps = cfg_.eps;
  p.weight_decay = cfg_.weight_decay;
  p.decoupled = cfg_.kind == OptimizerKind::kAdamW;
  p.step = step_count_;
  be_.optimizers().adam_step(w, g, s1_.get(), s2_.get(), n_, p);
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
