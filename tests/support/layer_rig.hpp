// Implements: a test harness that runs one layer on its own, outside a
// Model — its arenas as host vectors (the CPU backend's memory is host
// memory), a StepInfo the test sets, and one call per pass — so tests can
// drive forward, backward_params and backward_input (and the empty-shard
// calls) exactly as the model would, on any shard.
#pragma once

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dptrain/backends/backend.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_spec.hpp"

namespace dptrain::testing {

// A ReplicaSum of one replica that counts its calls: the sum is the input.
class CountingReplicaSum : public ReplicaSum {
 public:
  void sum(float*, std::size_t) override { ++calls; }
  int calls = 0;
};

struct LayerRig {
  // token: one --model token ("bn", "dropout:0.3"); index: the <i> of its name.
  LayerRig(Backend& be, const std::string& token, const Shape& input, int max_rows, int index = 0)
      : be_(be) {
    const LayerSpec spec = parse_model_spec(token + ",dense:1").front();
    LayerContext ctx;
    ctx.input = input;
    ctx.index = index;
    ctx.name = spec.kind + std::to_string(index);
    layer = make_layer(spec, ctx);
    params.assign(arena_size(layer->params()), 0.0f);
    grads.assign(params.size(), 0.0f);
    buffers.assign(arena_size(layer->buffers()), 0.0f);
    layer->bind({params.data(), grads.data(), buffers.data()}, &step);
    layer->allocate(be, max_rows);
    layer->init(1, false, {params.data(), nullptr, buffers.data()});
  }
  LayerRig(const LayerRig&) = delete;  // the layer points at step
  LayerRig& operator=(const LayerRig&) = delete;

  std::size_t width() const { return layer->input_shape().size(); }
  // In place: the layer holds pointers into the arenas, which must not move.
  void set_params(const std::vector<float>& values) {
    if (values.size() != params.size()) throw std::invalid_argument("set_params: wrong size");
    std::copy(values.begin(), values.end(), params.begin());
  }

  std::vector<float> forward(const std::vector<float>& x, int rows, Mode mode = Mode::kTrain) {
    std::vector<float> y(rows * layer->output_shape().size());
    if (rows == 0) {
      if (mode == Mode::kTrain && layer->communicates()) layer->forward_empty(be_);
      return y;
    }
    layer->forward(be_, {x.data(), rows, layer->input_shape()},
                   {y.data(), rows, layer->output_shape()}, mode);
    return y;
  }

  // The model's order: backward_params (layers with parameters), then
  // backward_input. Returns dx.
  std::vector<float> backward(const std::vector<float>& x, const std::vector<float>& y,
                              const std::vector<float>& dy, int rows) {
    std::vector<float> dx(rows * width());
    if (rows == 0) {
      std::fill(grads.begin(), grads.end(), 0.0f);
      if (layer->communicates()) layer->backward_empty(be_);
      return dx;
    }
    const ConstTensorView in{x.data(), rows, layer->input_shape()};
    const ConstTensorView g{dy.data(), rows, layer->output_shape()};
    if (!layer->params().empty()) layer->backward_params(be_, in, g);
    layer->backward_input(be_, in, {y.data(), rows, layer->output_shape()}, g,
                          {dx.data(), rows, layer->input_shape()});
    return dx;
  }

  Backend& be_;
  std::unique_ptr<Layer> layer;
  // The arenas: never reassign them (set_params), the layer points into them.
  std::vector<float> params, grads, buffers;
  StepInfo step;
};

}  // namespace dptrain::testing
