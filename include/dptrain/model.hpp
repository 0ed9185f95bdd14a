// Implements: the MLP tower built from --model. Parameters and gradients each
// live in one contiguous arena on the backend, laid out dense0.weight
// [out,in], dense0.bias [out], dense1.weight, ... so gradient exchange is one
// (or a few bucketed) all-reduce calls and checkpoints map 1:1 to
// /model/dense<i>/{weight,bias}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backend.hpp"

namespace dptrain {

struct LayerSpec {
  enum class Kind { kDense, kActivation };
  Kind kind = Kind::kDense;
  int units = 0;                          // dense only
  Activation activation = Activation::kRelu;  // activation only
};

// "dense:256,relu,dense:10" -> layers. Throws Error(kUsage) naming the bad
// token. Requires at least one dense layer and a dense layer last.
std::vector<LayerSpec> parse_model_spec(const std::string& spec);
std::string activation_name(Activation a);

struct DenseInfo {
  std::string name;  // "dense0", "dense1", ...
  int in = 0, out = 0;
  std::size_t weight_offset = 0;  // into the arena, in floats
  std::size_t bias_offset = 0;
};

// What forward and backward tell the caller as they go: a point between
// layers (to move communication along) and, in backward, each time a suffix
// of the gradient arena is final (last layer first), so that its all-reduce
// can start while earlier layers still compute.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void between_layers() {}
  // Gradients from arena offset `begin` to the end are final for this step.
  virtual void grads_ready(std::size_t begin) { (void)begin; }
};

// The arena layout of dense layers of widths {in, out0, out1, ...}: dense<i>
// weight [out_i, in_i] then bias [out_i], in layer order (what Model builds).
std::vector<DenseInfo> dense_layout(const std::vector<int>& widths);
// Floats in such an arena.
inline std::size_t arena_size(const std::vector<DenseInfo>& layout) {
  return layout.empty() ? 0 : layout.back().bias_offset + layout.back().out;
}

class Model {
 public:
  // max_rows: the largest number of rows forward/backward will be called
  // with (activation buffers are allocated once, here).
  Model(Backend& backend, std::vector<LayerSpec> layers, int input_dim, int max_rows);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // He-uniform (layers followed by relu/gelu) or Glorot-uniform weights,
  // zero biases, from the seed alone.
  void init(std::uint64_t seed);

  // Forward over x[rows, input_dim] (device); returns the output [rows, out].
  // Keeps the activations needed by backward.
  const float* forward(const float* x, int rows, LayerHooks* hooks = nullptr);
  // Backward from dout[rows, out] (device, typically output_grad()), after
  // forward with the same x and rows. Overwrites the gradient arena; calls
  // hooks->grads_ready with decreasing offsets, ending with 0.
  void backward(const float* x, const float* dout, int rows, LayerHooks* hooks = nullptr);

  float* params() { return params_.get(); }
  float* grads() { return grads_.get(); }
  // Buffer [max_rows, output_dim] for the loss gradient.
  float* output_grad() { return dout_.get(); }
  std::size_t num_params() const { return num_params_; }
  int input_dim() const { return input_dim_; }
  int output_dim() const { return output_dim_; }
  int max_rows() const { return max_rows_; }
  const std::vector<DenseInfo>& dense_layers() const { return dense_; }
  const std::vector<LayerSpec>& layers() const { return layers_; }
  std::string spec() const;

 private:
  Backend& be_;
  std::vector<LayerSpec> layers_;
  std::vector<DenseInfo> dense_;
  std::vector<int> layer_dense_;  // layer index -> dense index, -1 for activations
  std::vector<int> layer_width_;  // output width of each layer
  int input_dim_, output_dim_, max_rows_;
  std::size_t num_params_ = 0;
  DeviceBuffer<float> params_, grads_;
  std::vector<DeviceBuffer<float>> acts_;  // output of each layer [max_rows, width]
  DeviceBuffer<float> dout_, dbuf_a_, dbuf_b_;  // gradient ping-pong buffers
};

}  // namespace dptrain
