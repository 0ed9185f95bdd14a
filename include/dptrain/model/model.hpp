// Implements: the tower built from --model (docs/design.md section 1): the
// ordered layers over one parameter arena, one gradient arena laid out like
// it and one buffer arena for non-trained state. Layer i's tensors follow
// layer i - 1's (dense0/weight [out,in], dense0/bias [out], dense1/...), so
// gradient exchange is one (or a few bucketed) all-reduce calls and
// checkpoints map 1:1 to /model/<layer>/<tensor>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_events.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

// "relu", "tanh", "gelu", "sigmoid": the activation family's token names.
std::string activation_name(Activation a);

// --recompute: kBlocks keeps only each top-level layer's input (and what
// the layer cannot recompute) from forward, and runs a top-level layer's
// forward again (Mode::kRecompute) right before its backward.
enum class Recompute { kNone, kBlocks };
// "none" or "blocks"; anything else is Error(kUsage).
Recompute parse_recompute(const std::string& name);

// kPlanOnly: a model that only plans (train --plan-only, inspect): its
// layers reserve as usual, but neither the parameter, gradient and buffer
// arenas nor the activation arena are allocated, so a model far larger than
// this machine can be planned; activation_plan works, init, forward and
// backward refuse.
//
// kShardedParams (--shard-params): the strategy keeps the parameters and
// their gradients in slices; the model allocates neither arena (params()
// and grads() are null) and its buffers and activations as usual. Before a
// top-level layer runs, the strategy points it at that layer's gathered
// parameters and a gradient buffer (bind_layer); init_params fills a slice.
// It keeps no bf16 twin of the parameters (params_bf16_for_update).
//
// kPlanOnlyShardedParams: plans what kShardedParams holds, as kPlanOnly
// plans kAllocated.
enum class ModelStorage { kAllocated, kPlanOnly, kShardedParams, kPlanOnlyShardedParams };

// Logits::kBf16 (train under --precision bf16 with --loss xent): the last
// layer keeps its output in bf16 only where it can on this backend
// (Layer::write_output_bf16_only: the head dense on CUDA), as autocast
// does; the loss then reads the bf16 logits and writes their gradient over
// them (Model::output_bf16). kFp32: the output is fp32, as everywhere else.
enum class Logits { kFp32, kBf16 };

// A model's activation memory for some rows: what forward keeps for
// backward (layer outputs, saved tensors: the activations proper) and the
// workspace of a pass (gradient buffers, per-pass scratch).
struct ActivationPlan {
  std::size_t kept = 0, workspace = 0;
  std::size_t total() const { return kept + workspace; }
};

class Model {
 public:
  // max_rows: the largest number of rows forward/backward will be called
  // with (activation and gradient buffers are allocated once, here).
  // input_dim: flat samples [N, input_dim], as the data files give them.
  Model(Backend& backend, const std::vector<LayerSpec>& specs, int input_dim, int max_rows);
  // vocab > 0: samples are token ids [N, T] of that vocabulary (input {T}).
  Model(Backend& backend, const std::vector<LayerSpec>& specs, const Shape& input, int max_rows,
        int vocab = 0, Recompute recompute = Recompute::kNone,
        ModelStorage storage = ModelStorage::kAllocated, Logits logits = Logits::kFp32);
  // Layers already built for `input` (build_layers, or layers a test makes).
  Model(Backend& backend, std::vector<std::unique_ptr<Layer>> layers, const Shape& input,
        int max_rows, int vocab = 0, Recompute recompute = Recompute::kNone,
        ModelStorage storage = ModelStorage::kAllocated, Logits logits = Logits::kFp32);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Every layer initializes its own tensors from the seed alone (dense: He-
  // uniform before relu/gelu, else Glorot-uniform; zero biases). Under
  // kShardedParams only the buffer arena.
  void init(std::uint64_t seed);
  // The parameters [range.offset, + count) as init(seed) makes them, into
  // dst (device), one layer's worth of host memory at a time.
  void init_params(std::uint64_t seed, ArenaRange range, float* dst) const;
  // The arena range of top-level layer li's parameters (count 0: none).
  ArenaRange layer_params(std::size_t li) const;
  // The most parameters a top-level layer has (a unit of --shard-params).
  std::size_t largest_layer_params() const;
  // kShardedParams: layer li reads its parameters at params_base + offset
  // and writes its gradients at grads_base + offset from now on (arena_base
  // makes such bases from a unit's buffers).
  void bind_layer(std::size_t li, float* params_base, float* grads_base);
  // kShardedParams: this rank's slice of the parameters (device), as the
  // strategy keeps it ([state slice r] of the arena), for checkpoints.
  void set_param_slice(float* slice) { param_slice_ = slice; }
  float* param_slice() const { return param_slice_; }
  ModelStorage storage() const { return storage_; }
  bool plans_only() const {
    return storage_ == ModelStorage::kPlanOnly || storage_ == ModelStorage::kPlanOnlyShardedParams;
  }

  // Forward over x[rows, input] (device); returns the output [rows, output]
  // (where output_bf16() is not null, the output is there, in bf16 only,
  // and the buffer returned is the head's scratch).
  // Keeps each layer's output, which backward reads. `events` (a listener,
  // or a LayerEvents list of them) hears before_forward of every top-level
  // layer, also on an empty shard, and between_layers after each.
  const float* forward(const float* x, int rows, LayerListener* events = nullptr,
                       Mode mode = Mode::kTrain);
  // Backward from dout[rows, output] (device, typically output_grad()),
  // after forward with the same x and rows. Overwrites the gradient arena;
  // tells `events` before_backward of each layer it runs (last first; every
  // layer with parameters on an empty shard), between_layers, and
  // grads_ready with decreasing offsets, ending with 0. No gradient flows
  // past the first layer with parameters.
  // dout_bf16: the loss's bf16 copy of dout, written into
  // output_grad_bf16() by the loss (else null).
  void backward(const float* x, const float* dout, int rows, LayerListener* events = nullptr,
                const std::uint16_t* dout_bf16 = nullptr);

  // The step the next forward and backward run in (seed, epoch, the
  // shard's first global row, the global batch, the replica sum). Default:
  // a shard that is the whole batch.
  void set_step(const StepInfo& step) { step_ = step; }
  const StepInfo& step() const { return step_; }
  // True when a layer takes part in collectives in training (Layer::
  // communicates): every rank must then run forward and backward, also on
  // an empty shard.
  bool communicates() const;

  // The parameter arena. Whoever takes it writable may change it, so the
  // bf16 twin (params_bf16) is rounded again before the next pass reads it;
  // a reader that changes nothing takes the const one.
  float* params() {
    twin_current_ = false;
    return params_.get();
  }
  const float* params() const { return params_.get(); }
  // Where the backend rounds GEMM operands (CUDA under --precision bf16)
  // and the model holds its whole arena: the parameters rounded to bf16,
  // which the layers' GEMMs read (ParamsBf16). forward rounds the arena
  // into it in one pass where it is out of date; an update that writes
  // every parameter and its rounding in one pass (Optimizer::step's w16)
  // takes it here, which counts it up to date. nullptr elsewhere.
  std::uint16_t* params_bf16_for_update() {
    if (!params16_.get()) return nullptr;
    twin_current_ = true;
    return params16_.get();
  }
  // The twin as it is now (nullptr where the model keeps none).
  const std::uint16_t* params_bf16() const { return params16_.get(); }
  // Rounds the parameters into the twin where it is out of date, as
  // forward does first (for a caller that runs the layers itself).
  void round_params();
  // Before a pass that is recorded or replayed (Backend::record): queues
  // what its forward would queue first on the host's say, the rounding
  // above and each layer's step values in device memory (Layer::
  // stage_step), so that the recorded pass holds none of it.
  void stage_step();
  // Its device bytes (0 where the model keeps none).
  std::size_t params_bf16_bytes() const { return twin_ ? num_params() * sizeof(std::uint16_t) : 0; }
  float* grads() { return grads_.get(); }
  float* buffers() { return buffers_.get(); }
  // Where the loss writes the gradient of the output, [max_rows,
  // output_dim]: the output buffer itself (forward's result is overwritten)
  // where the last layer's backward does not read its output, else a
  // buffer of its own.
  float* output_grad() { return dout_.get() ? dout_.get() : acts_.back().get(); }
  // Where the loss also writes the output gradient rounded to bf16, for the
  // last layer's GEMMs to read (Layer::output_grad_bf16: a dense layer on
  // CUDA under --precision bf16); nullptr where the last layer rounds
  // nothing. The copy is then passed to backward as dout_bf16.
  std::uint16_t* output_grad_bf16() const { return layers_.back()->output_grad_bf16(); }
  // Logits::kBf16 where the last layer writes its output in bf16 only: the
  // output of forward [rows, output], which the loss overwrites with its
  // gradient (the same buffer as output_grad_bf16()); else nullptr.
  std::uint16_t* output_bf16() const { return output_bf16_ ? output_grad_bf16() : nullptr; }
  std::size_t num_params() const { return arena_size(params_layout_); }
  std::size_t num_buffers() const { return arena_size(buffers_layout_); }
  const Shape& input_shape() const { return input_; }
  const Shape& output_shape() const { return layers_.back()->output_shape(); }
  int input_dim() const { return static_cast<int>(input_.size()); }
  // The vocabulary of its token-id input (0: the input is features).
  int vocab() const { return vocab_; }
  int output_dim() const { return static_cast<int>(output_shape().size()); }
  // A sequence output [T, C] holds T positions of C values (a language
  // model's logits); any other output is one position of output_dim().
  int output_positions() const { return output_shape().rank() == 2 ? output_shape()[0] : 1; }
  int output_classes() const { return output_dim() / output_positions(); }
  int max_rows() const { return max_rows_; }
  // Device bytes of what forward and backward keep for max_rows rows: every
  // layer's output, the gradient buffers and the layers' own workspaces;
  // and the largest of the model's output and gradient buffers.
  std::size_t activation_bytes() const { return activation_bytes_; }
  // The same for any number of rows, with or without recomputation, split
  // into kept and workspace: the plan, from the layout this model's arena
  // was allocated by (activation_bytes() == activation_plan(max_rows(),
  // recompute()).total()).
  ActivationPlan activation_plan(int rows, Recompute recompute) const;
  Recompute recompute() const { return recompute_ ? Recompute::kBlocks : Recompute::kNone; }
  std::size_t largest_activation_bytes() const { return largest_activation_bytes_; }
  // Every tensor of the parameter (buffer) arena, in arena order.
  const std::vector<ParamInfo>& param_layout() const { return params_layout_; }
  const std::vector<ParamInfo>& buffer_layout() const { return buffers_layout_; }
  std::size_t num_layers() const { return layers_.size(); }
  const Layer& layer(std::size_t i) const { return *layers_[i]; }
  std::string spec() const;
  // The layers' implementations where they have a choice, each with its
  // count in order of first appearance: "attention fused (2 layers)"; empty
  // for a model without such layers.
  std::string implementations() const;

 private:
  ConstTensorView input_of(std::size_t li, const float* x, int rows) const;
  TensorView output_of(std::size_t li, int rows) const;  // layer li's output buffer
  // A buffer of the model's own in the activation arena, per_row floats a row.
  ArenaBuffer<float> model_buffer(std::size_t per_row, Lifetime life);
  // Layer li's parameters as init makes them, into host (resized to the
  // layer's count, addressed from its first offset); its buffers into the
  // whole buffer arena `buffers`.
  void init_layer(std::uint64_t seed, std::size_t li, std::vector<float>& host,
                  std::vector<float>& buffers) const;
  // Error(kOther) naming `what` on a model built with kPlanOnly.
  void require_storage(const char* what) const;
  // The bf16 twin (twin_, params16_) where the model keeps one.
  void make_params_twin();
  // The constructor's parts: the layers' parameter and buffer layouts
  // checked and gathered (returns the largest input of a layer, per
  // sample); each layer bound to the arenas and allocating its own buffers,
  // its activations reserved; the model's own activation buffers reserved.
  std::size_t collect_layouts();
  void bind_layers(Logits logits);
  void reserve_model_buffers(std::size_t max_input);

  Backend& be_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Shape input_;
  int max_rows_;
  int vocab_;
  std::vector<ParamInfo> params_layout_, buffers_layout_;
  StepInfo step_;  // layers hold a pointer to it
  bool recompute_;
  ModelStorage storage_;
  bool output_bf16_ = false;  // Logits::kBf16 and the last layer writes them so
  float* param_slice_ = nullptr;
  std::vector<bool> absorbs_;  // layer li runs layer li + 1 in its passes (bind_layers)
  std::vector<float*> bound_grads_;  // kShardedParams: each layer's gradient base (bind_layer)
  std::size_t activation_bytes_ = 0, largest_activation_bytes_ = 0, own_layer_bytes_ = 0;
  std::size_t first_trained_ = 0;  // first layer with parameters (layers_.size(): none)
  DeviceBuffer<float> params_, grads_, buffers_;
  // The bf16 twin of params_ (params_bf16_for_update), where the model keeps
  // one: twin_ points the layers at it (null: no twin); twin_current_ says
  // whether it holds the rounding of the parameters as they are.
  DeviceBuffer<std::uint16_t> params16_;
  std::unique_ptr<ParamsBf16> twin_;
  bool twin_current_ = false;
  // Every per-row buffer below and the layers' (activation_arena.hpp).
  ActivationArena arena_;
  std::vector<ArenaBuffer<float>> acts_;  // output of each layer [max_rows, its output shape]
  // The loss gradient, and two buffers that take turns holding the
  // gradient w.r.t. a layer's input; a container layer keeps its inner
  // gradients in buffers of its own, so two suffice at this level.
  ArenaBuffer<float> dout_, dbuf_a_, dbuf_b_;
  // Where the backend rounds GEMM operands: the bf16 copies of dbuf_a_ and
  // dbuf_b_ that a layer writing its input gradient's rounding
  // (Layer::writes_input_grad_bf16) fills for the layer before it.
  ArenaBuffer<std::uint16_t> dbuf16_a_, dbuf16_b_;
};

}  // namespace dptrain
