// Implements: --model spec parsing and the MLP tower (forward, backward,
// init) over one parameter arena and one gradient arena. Talks to the device
// only through Backend, so the same code runs on the CPU and CUDA backends.
#include "dptrain/model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "dptrain/error.hpp"
#include "dptrain/random.hpp"

namespace dptrain {
namespace {

// Purpose word for mix_seed, so init draws never coincide with shuffle or
// dropout draws made from the same --seed.
constexpr std::uint64_t kInitPurpose = 0x696e6974;  // "init"
constexpr const char* kValidTokens = "dense:N (N >= 1), relu, tanh, gelu, sigmoid";

constexpr Activation kActivations[] = {Activation::kRelu, Activation::kTanh, Activation::kGelu,
                                       Activation::kSigmoid};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

[[noreturn]] void bad_token(const std::string& token, const std::string& spec,
                            const std::string& why = {}) {
  throw Error(ExitCode::kUsage, "--model: bad layer '" + token + "' in '" + spec + "'" +
                                    (why.empty() ? "" : " (" + why + ")") +
                                    "; valid layers: " + kValidTokens);
}

LayerSpec parse_token(const std::string& token, const std::string& spec) {
  LayerSpec layer;
  if (token.rfind("dense:", 0) == 0) {
    const std::string num = token.substr(6);
    int units = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), units);
    if (num.empty() || ec != std::errc() || end != num.data() + num.size())
      bad_token(token, spec, "width must be an integer");
    if (units < 1) bad_token(token, spec, "width must be >= 1");
    layer.kind = LayerSpec::Kind::kDense;
    layer.units = units;
    return layer;
  }
  for (Activation a : kActivations) {
    if (token == activation_name(a)) {
      layer.kind = LayerSpec::Kind::kActivation;
      layer.activation = a;
      return layer;
    }
  }
  bad_token(token, spec);
}

}  // namespace

std::string activation_name(Activation a) {
  switch (a) {
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kGelu:
      return "gelu";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "unknown";
}

std::vector<DenseInfo> dense_layout(const std::vector<int>& widths) {
  std::vector<DenseInfo> layout;
  std::size_t n = 0;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    DenseInfo d;
    d.name = "dense" + std::to_string(i);
    d.in = widths[i];
    d.out = widths[i + 1];
    d.weight_offset = n;
    d.bias_offset = n + static_cast<std::size_t>(d.in) * d.out;
    n = d.bias_offset + d.out;
    layout.push_back(std::move(d));
  }
  return layout;
}

std::vector<LayerSpec> parse_model_spec(const std::string& spec) {
  std::vector<LayerSpec> layers;
  std::size_t pos = 0;
  while (true) {
    const auto comma = spec.find(',', pos);
    const std::string token =
        trim(spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (token.empty()) bad_token(token, spec, "empty layer");
    layers.push_back(parse_token(token, spec));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (layers.back().kind != LayerSpec::Kind::kDense)
    throw Error(ExitCode::kUsage, "--model: the last layer of '" + spec +
                                      "' must be dense:N (it gives the output width)");
  return layers;
}

Model::Model(Backend& backend, std::vector<LayerSpec> layers, int input_dim, int max_rows)
    : be_(backend),
      layers_(std::move(layers)),
      input_dim_(input_dim),
      output_dim_(0),
      max_rows_(max_rows) {
  DPT_REQUIRE(!layers_.empty() && layers_.back().kind == LayerSpec::Kind::kDense, ExitCode::kUsage,
              "the model needs a dense layer last");
  DPT_REQUIRE(input_dim_ >= 1, ExitCode::kData, "the input width must be at least 1");
  DPT_REQUIRE(max_rows_ >= 0, ExitCode::kOther, "max_rows must not be negative");

  std::vector<int> widths{input_dim_};
  int width = input_dim_;
  int max_width = input_dim_;
  for (const LayerSpec& l : layers_) {
    if (l.kind == LayerSpec::Kind::kDense) {
      DPT_REQUIRE(l.units >= 1, ExitCode::kUsage, "dense width must be >= 1");
      layer_dense_.push_back(static_cast<int>(widths.size()) - 1);
      widths.push_back(l.units);
      width = l.units;
    } else {
      layer_dense_.push_back(-1);
    }
    layer_width_.push_back(width);
    max_width = std::max(max_width, width);
  }
  output_dim_ = width;
  dense_ = dense_layout(widths);
  num_params_ = arena_size(dense_);

  const auto rows = static_cast<std::size_t>(max_rows_);
  params_ = DeviceBuffer<float>(be_, num_params_);
  grads_ = DeviceBuffer<float>(be_, num_params_);
  for (int w : layer_width_) acts_.emplace_back(be_, rows * w);
  dout_ = DeviceBuffer<float>(be_, rows * output_dim_);
  dbuf_a_ = DeviceBuffer<float>(be_, rows * max_width);
  dbuf_b_ = DeviceBuffer<float>(be_, rows * max_width);
}

void Model::init(std::uint64_t seed) {
  std::vector<float> host(num_params_, 0.0f);
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const int di = layer_dense_[li];
    if (di < 0) continue;
    const DenseInfo& d = dense_[di];
    const bool rectifier_next = li + 1 < layers_.size() &&
                                layers_[li + 1].kind == LayerSpec::Kind::kActivation &&
                                (layers_[li + 1].activation == Activation::kRelu ||
                                 layers_[li + 1].activation == Activation::kGelu);
    const double limit = rectifier_next ? std::sqrt(6.0 / d.in) : std::sqrt(6.0 / (d.in + d.out));
    Rng rng(mix_seed(seed, kInitPurpose, static_cast<std::uint64_t>(di)));
    float* w = host.data() + d.weight_offset;
    const std::size_t n = static_cast<std::size_t>(d.in) * d.out;
    for (std::size_t i = 0; i < n; ++i)
      w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * limit);
  }
  if (num_params_) be_.copy_to_device(params_.get(), host.data(), num_params_ * sizeof(float));
}

const float* Model::forward(const float* x, int rows, LayerHooks* hooks) {
  DPT_REQUIRE(rows >= 0 && rows <= max_rows_, ExitCode::kOther,
              "forward with " + std::to_string(rows) + " rows, more than max_rows " +
                  std::to_string(max_rows_));
  if (rows == 0) return acts_.back().get();
  const float* in = x;
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    float* out = acts_[li].get();
    const int width = layer_width_[li];
    if (layer_dense_[li] >= 0) {
      const DenseInfo& d = dense_[layer_dense_[li]];
      const float* w = params_.get() + d.weight_offset;
      be_.gemm(false, true, rows, d.out, d.in, 1.0f, in, d.in, w, d.in, 0.0f, out, d.out);
      be_.add_bias(out, params_.get() + d.bias_offset, rows, d.out);
    } else {
      be_.activation_forward(layers_[li].activation, in, out,
                             static_cast<std::size_t>(rows) * width);
    }
    in = out;
    if (hooks) hooks->between_layers();
  }
  return acts_.back().get();
}

void Model::backward(const float* x, const float* dout, int rows, LayerHooks* hooks) {
  DPT_REQUIRE(rows >= 0 && rows <= max_rows_, ExitCode::kOther,
              "backward with " + std::to_string(rows) + " rows, more than max_rows " +
                  std::to_string(max_rows_));
  if (rows == 0) {
    // An empty shard still takes part in the all-reduce: it adds exact zeros.
    be_.fill(grads_.get(), 0.0f, num_params_);
    if (hooks) hooks->grads_ready(0);
    return;
  }
  // Layers before the first dense one have no parameters, so the gradient
  // need not flow past it.
  std::size_t first_dense = 0;
  while (layer_dense_[first_dense] < 0) ++first_dense;

  const float* g = dout;  // gradient w.r.t. the output of layer li
  for (std::size_t li = layers_.size(); li-- > first_dense;) {
    const float* in = li == 0 ? x : acts_[li - 1].get();
    float* dst = g == dbuf_a_.get() ? dbuf_b_.get() : dbuf_a_.get();
    if (layer_dense_[li] >= 0) {
      const DenseInfo& d = dense_[layer_dense_[li]];
      float* gw = grads_.get() + d.weight_offset;
      // dW[out,in] = dy^T [out,rows] . x [rows,in]
      be_.gemm(true, false, d.out, d.in, rows, 1.0f, g, d.out, in, d.in, 0.0f, gw, d.in);
      be_.bias_grad(g, grads_.get() + d.bias_offset, rows, d.out);
      // Arena order is layer order, so this layer and all later ones are done.
      if (hooks) hooks->grads_ready(d.weight_offset);
      if (li == first_dense) break;
      // dx[rows,in] = dy [rows,out] . W [out,in]
      be_.gemm(false, false, rows, d.in, d.out, 1.0f, g, d.out, params_.get() + d.weight_offset,
               d.in, 0.0f, dst, d.in);
    } else {
      be_.activation_backward(layers_[li].activation, in, acts_[li].get(), g, dst,
                              static_cast<std::size_t>(rows) * layer_width_[li]);
    }
    if (hooks) hooks->between_layers();
    g = dst;
  }
}

std::string Model::spec() const {
  std::string s;
  for (const LayerSpec& l : layers_) {
    if (!s.empty()) s += ',';
    s += l.kind == LayerSpec::Kind::kDense ? "dense:" + std::to_string(l.units)
                                           : activation_name(l.activation);
  }
  return s;
}

}  // namespace dptrain
