// Implements: the Layer base (layer.hpp) — how a layer declares its tensors
// at consecutive arena offsets —, the ParamInfo helpers that buckets,
// checkpoints and inspect use to walk any layout, and Shape (tensor.hpp):
// construction checks, sizes and the text form used in messages.
#include "dptrain/model/layer.hpp"

#include <limits>

#include "dptrain/common/error.hpp"
#include "dptrain/model/tensor.hpp"

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

Shape::Shape(std::initializer_list<int> dims) {
  DPT_REQUIRE(dims.size() <= static_cast<std::size_t>(kMaxRank), ExitCode::kOther,
              "a sample shape has at most " + std::to_string(kMaxRank) + " dimensions, not " +
                  std::to_string(dims.size()));
  for (int d : dims) {
    DPT_REQUIRE(d >= 1, ExitCode::kOther,
                "a sample dimension must be at least 1, not " + std::to_string(d));
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
}

std::size_t Shape::size() const {
  std::size_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= static_cast<std::size_t>(dims_[static_cast<std::size_t>(i)]);
  return n;
}

Shape Shape::flattened() const {
  const std::size_t n = size();
  DPT_REQUIRE(n <= static_cast<std::size_t>(std::numeric_limits<int>::max()), ExitCode::kData,
              "a sample of shape " + to_string() + " has more than 2^31 values");
  return Shape{static_cast<int>(n)};
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string((*this)[i]);
  return s + "]";
}

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

void Layer::backward_input_adding(Backend& be, ConstTensorView x, ConstTensorView y,
                                  ConstTensorView dy, TensorView dx, ConstTensorView add) {
  backward_input(be, x, y, dy, {dx.data, dx.rows, dx.shape});
  be.sum(dx.data, add.data, dx.data, dx.count(), dx.bf16);
}

void Layer::forward_adding(Backend& be, ConstTensorView x, ConstTensorView add, TensorView y,
                           Mode mode) {
  forward(be, x, y, mode);
  be.add(add.data, y.data, y.count());
}

void Layer::throw_no_folding() const {
  throw Error(ExitCode::kOther, name_ + " folds no neighbouring layer into its own passes");
}

std::size_t Layer::add_param(std::string name, std::vector<std::size_t> shape) {
  // "out_proj/weight": a tensor of a named part of this layer, stored as
  // /model/<layer>/out_proj/weight (torch's module path).
  const std::size_t slash = name.rfind('/');
  const std::string layer = slash == std::string::npos ? name_ : name_ + "/" + name.substr(0, slash);
  if (slash != std::string::npos) name.erase(0, slash + 1);
  params_.push_back(make_tensor(layer, std::move(name), std::move(shape), next_param_));
  next_param_ += params_.back().count;
  return params_.back().offset;
}

std::size_t Layer::add_buffer(std::string name, std::vector<std::size_t> shape) {
  buffers_.push_back(make_tensor(name_, std::move(name), std::move(shape), next_buffer_));
  next_buffer_ += buffers_.back().count;
  return buffers_.back().offset;
}

void Layer::adopt_tensors(const Layer& part) {
  for (const ParamInfo& p : part.params()) {
    DPT_REQUIRE(p.offset == next_param_, ExitCode::kOther, p.path() + ": arena offset out of order");
    params_.push_back(p);
    next_param_ += p.count;
  }
  for (const ParamInfo& b : part.buffers()) {
    DPT_REQUIRE(b.offset == next_buffer_, ExitCode::kOther, b.path() + ": buffer offset out of order");
    buffers_.push_back(b);
    next_buffer_ += b.count;
  }
}

}  // namespace dptrain
