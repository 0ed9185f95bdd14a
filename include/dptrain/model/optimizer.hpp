// Implements: SGD (momentum, Nesterov), Adam and AdamW over the whole
// parameter arena in one fused backend call, and the learning-rate schedules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backends/backend.hpp"

namespace dptrain {

enum class OptimizerKind { kSgd, kAdam, kAdamW };
enum class LrScheduleKind { kConstant, kCosine, kStep };

OptimizerKind parse_optimizer(const std::string& name);     // Error(kUsage) on bad name
const char* optimizer_name(OptimizerKind kind);             // as --optimizer spells it
LrScheduleKind parse_lr_schedule(const std::string& name);  // Error(kUsage) on bad name

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

class Optimizer {
 public:
  Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n);
  // One update of w with gradient g at learning rate lr; increments step_count.
  void step(float* w, const float* g, float lr);
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t s) { step_count_ = s; }
  // Named state arenas (device), each of n floats: "velocity" for SGD with
  // momentum, "m" and "v" for Adam/AdamW. Used by checkpoints.
  struct State {
    std::string name;
    float* data;
  };
  std::vector<State> state();
  std::size_t size() const { return n_; }
  const OptimizerConfig& config() const { return cfg_; }

 private:
  Backend& be_;
  OptimizerConfig cfg_;
  std::size_t n_;
  std::int64_t step_count_ = 0;
  DeviceBuffer<float> s1_, s2_;
};

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  float base_lr = 1e-3f;
  std::int64_t warmup_steps = 0;  // linear from base/warmup to base
  std::int64_t total_steps = 1;   // for cosine: reaches min_lr at total_steps
  std::int64_t step_size = 1000;  // for step: multiply by gamma every step_size steps
  float gamma = 0.1f;
  float min_lr = 0.0f;            // for cosine
};

// Learning rate for 0-based optimizer step `step`.
float learning_rate(const LrScheduleConfig& cfg, std::int64_t step);

}  // namespace dptrain
