// Implements: SGD (momentum, Nesterov), Adam and AdamW over the whole
// parameter arena, or one rank's slice of it (--shard-optimizer), in one
// fused backend call (one per stretch of it when only matrices decay),
// gradient-norm clipping, and the learning-rate schedules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/model/layer.hpp"

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
  // --clip-grad-norm: 0 = off; else scale the gradient by
  // min(1, clip / (||g|| + 1e-6)) before the update (torch's clip_grad_norm_).
  float clip_grad_norm = 0.0f;
  // --weight-decay-params: decay_all, or only the arena ranges listed (the
  // tensors of rank >= 2, matrices_decay_ranges()).
  bool decay_all = true;
  std::vector<ArenaRange> decay_ranges;
};

// How many state arrays of the arena's size an optimizer of this config
// keeps: 0 plain SGD, 1 SGD with momentum, 2 Adam and AdamW.
int state_arrays_of(const OptimizerConfig& cfg);

// --weight-decay-params: "all" or "matrices". Error(kUsage) on another name.
bool parse_decay_all(const std::string& name);
// The ranges of the tensors of rank >= 2 (dense and conv weights, embeddings,
// attention projections) in an arena laid out as `layout`, adjacent ones
// merged: what --weight-decay-params matrices decays.
std::vector<ArenaRange> matrices_decay_ranges(const std::vector<ParamInfo>& layout);

// --shard-optimizer: the arena [0, n) cut into `parts` contiguous slices in
// rank order, balanced (sizes differ by at most one float, the larger ones
// first): parts + 1 ascending offsets, bounds[0] = 0, bounds[parts] = n.
std::vector<std::size_t> slice_bounds(std::size_t n, int parts);

class Optimizer {
 public:
  // Updates the whole arena of n floats.
  Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n);
  // Updates only `owned`, a slice of the arena of n floats, and keeps the
  // state of that slice alone (--shard-optimizer: every rank one slice).
  Optimizer(Backend& backend, const OptimizerConfig& cfg, std::size_t n, ArenaRange owned);
  // One update of the owned slice of w with gradient g at learning rate lr
  // (w and g are whole arenas); increments step_count. With clipping, g is
  // first scaled in place (so it is not const), as
  // torch.nn.utils.clip_grad_norm_ does; the norm is that of the whole
  // gradient: total_sum_squares when given (a sliced step sums its slices'
  // local_sum_squares over ranks), else this optimizer's own slice's.
  // w16 (a whole arena of bf16 values, or null): the owned slice's new
  // values rounded to bf16 are written there in the same pass
  // (Model::params_bf16_for_update).
  void step(float* w, float* g, float lr, const double* total_sum_squares = nullptr,
            std::uint16_t* w16 = nullptr);
  // The sum of g[i]^2 over the owned slice (double, a fixed order).
  double local_sum_squares(const float* g) const;
  bool clips() const { return cfg_.clip_grad_norm > 0.0f; }
  // The L2 norm of the gradient of the last step, before clipping; computed
  // only when clipping is on (0 otherwise).
  float last_grad_norm() const { return grad_norm_; }
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t s) { step_count_ = s; }
  // Named state arenas (device), each of size() floats, for the owned
  // slice: "velocity" for SGD with momentum, "m" and "v" for Adam/AdamW.
  // Used by checkpoints.
  struct State {
    std::string name;
    float* data;
  };
  std::vector<State> state();
  std::size_t size() const { return owned_.count; }
  std::size_t arena_size() const { return n_; }
  ArenaRange owned() const { return owned_; }
  std::size_t state_bytes() const { return state_arrays() * owned_.count * sizeof(float); }
  // How many state arrays of the arena's size this optimizer keeps (0..2).
  int state_arrays() const;
  const OptimizerConfig& config() const { return cfg_; }

 private:
  Backend& be_;
  OptimizerConfig cfg_;
  std::size_t n_;
  // The arena cut where weight decay switches on or off; one range with
  // decay when every tensor decays.
  struct Segment {
    ArenaRange range;
    bool decay = true;
  };
  void clip(float* g, const double* total_sum_squares);

  ArenaRange owned_;
  std::int64_t step_count_ = 0;
  float grad_norm_ = 0.0f;
  std::vector<Segment> segments_;
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
