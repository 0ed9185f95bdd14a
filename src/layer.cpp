// Implements: the Layer base (layer.hpp) — how a layer declares its tensors
// at consecutive arena offsets — and the ParamInfo helpers that buckets,
// checkpoints and inspect use to walk any layout.
#include "dptrain/layer.hpp"

#include "dptrain/error.hpp"

namespace dptrain {
namespace {

ParamInfo make_tensor(const std::string& layer, std::string name, std::vector<std::size_t> shape,
                      std::size_t offset) {
  ParamInfo p;
  p.layer = layer;
  p.name = std::move(name);
  p.count = 1;
  for (std::size_t d : shape) p.count *= d;
  DPT_REQUIRE(!shape.empty() && p.count > 0, ExitCode::kOther,
              layer + "/" + p.name + ": a tensor needs a non-empty shape");
  p.shape = std::move(shape);
  p.offset = offset;
  return p;
}

}  // namespace

std::size_t arena_size(const std::vector<ParamInfo>& tensors) {
  return tensors.empty() ? 0 : tensors.back().offset + tensors.back().count;
}

std::vector<std::size_t> layer_begins(const std::vector<ParamInfo>& tensors) {
  std::vector<std::size_t> begins;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (i == 0 || tensors[i].layer != tensors[i - 1].layer) begins.push_back(tensors[i].offset);
  return begins;
}

std::string dims_string(const std::vector<std::size_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Layer::Layer(const LayerContext& ctx, const Shape& output)
    : name_(ctx.name),
      input_(ctx.input),
      output_(output),
      next_param_(ctx.param_offset),
      next_buffer_(ctx.buffer_offset) {}

std::size_t Layer::add_param(std::string name, std::vector<std::size_t> shape) {
  params_.push_back(make_tensor(name_, std::move(name), std::move(shape), next_param_));
  next_param_ += params_.back().count;
  return params_.back().offset;
}

std::size_t Layer::add_buffer(std::string name, std::vector<std::size_t> shape) {
  buffers_.push_back(make_tensor(name_, std::move(name), std::move(shape), next_buffer_));
  next_buffer_ += buffers_.back().count;
  return buffers_.back().offset;
}

}  // namespace dptrain
