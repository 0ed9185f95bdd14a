// Implements: the convolution layer family, `conv:C:K[:S[:P]]` — C filters
// of K×K (K×K×K on volumes), stride S [1], zero padding P [(K-1)/2], with
// bias; torch.nn.Conv2d / Conv3d's parameters (weight [out, in, k, k(, k)],
// bias [out]) and output size floor((in + 2P - K) / S) + 1. The passes are
// the backend's convolution plan, made once at allocate. Under bf16 on CUDA
// x, the weight and dy are each rounded once a step and handed to the
// passes that read them (RoundedOperand), where the plan rounded each in
// every pass. Init as dense:
// He-uniform before a rectifier, else Glorot-uniform, zero bias.
#include <algorithm>
#include <cmath>

#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/common/random.hpp"
#include "model/layers/rounded_operand.hpp"
#include "model/layers/spatial_shape.hpp"

namespace dptrain {
namespace {

// Purpose word of conv init draws ("conv" + "init"): dense draws use
// kInitPurpose, so conv0 and dense0 of one model never share a stream.
constexpr std::uint64_t kConvInitPurpose = 0x636f6e76696e6974;

struct ConvArgs {
  int filters = 1, kernel = 1, stride = 1, padding = 0;
};

// Throws BadLayerToken with the reason.
ConvArgs parse_conv_args(const std::vector<std::string>& args) {
  if (args.size() < 2 || args.size() > 4)
    throw BadLayerToken("conv takes C:K[:S[:P]]");
  ConvArgs a;
  a.filters = parse_spatial_arg(args[0], "filters C", 1);
  a.kernel = parse_spatial_arg(args[1], "kernel K", 1);
  a.stride = args.size() > 2 ? parse_spatial_arg(args[2], "stride S", 1) : 1;
  a.padding = args.size() > 3 ? parse_spatial_arg(args[3], "padding P", 0) : (a.kernel - 1) / 2;
  return a;
}

// The shortest arguments that say the same: trailing defaults left out.
std::vector<std::string> canonical_args(const ConvArgs& a) {
  std::vector<std::string> args{std::to_string(a.filters), std::to_string(a.kernel)};
  const bool default_padding = a.padding == (a.kernel - 1) / 2;
  if (a.stride != 1 || !default_padding) args.push_back(std::to_string(a.stride));
  if (!default_padding) args.push_back(std::to_string(a.padding));
  return args;
}

ConvGeometry conv_geometry(const LayerSpec& spec, const LayerContext& ctx, const ConvArgs& a) {
  const std::string label = layer_label(spec, ctx);
  ConvGeometry g;
  g.dims = spatial_rank(ctx.input, label);
  g.in_channels = ctx.input[0];
  g.out_channels = a.filters;
  g.input = spatial_extent(ctx.input);
  g.kernel = uniform_extent(a.kernel);
  g.stride = uniform_extent(a.stride);
  g.padding = uniform_extent(a.padding);
  for (int d = 0; d < g.dims; ++d) {
    const int padded = g.input[d] + 2 * a.padding;
    DPT_REQUIRE(a.kernel <= padded, ExitCode::kUsage,
                label + ": kernel " + std::to_string(a.kernel) +
                    " is larger than the padded input (" + std::to_string(padded) + " along " +
                    "dimension " + std::to_string(d + 1) + " of " + ctx.input.to_string() + ")");
    g.output[d] = (padded - a.kernel) / a.stride + 1;
  }
  return g;
}

class Conv final : public Layer {
 public:
  Conv(const LayerContext& ctx, const ConvArgs& args, const ConvGeometry& g)
      : Layer(ctx, spatial_shape(g.out_channels, g.dims, g.output)),
        args_(args),
        geometry_(g),
        index_(ctx.index),
        weight_(add_param("weight", weight_shape(g))),
        bias_(add_param("bias", {std::size_t(g.out_channels)})) {}

  std::string spec() const override {
    std::string s = "conv";
    for (const std::string& a : canonical_args(args_)) s += ":" + a;
    return s;
  }

  void allocate(Backend& be, int max_rows) override {
    ConvGeometry g = geometry_;
    g.max_rows = std::max(1, max_rows);
    plan_ = plan_for(name(), [&] { return be.kernels<SpatialKernels>().conv_plan(g); });
    if (!RoundedOperand::wanted(be)) return;
    auto slot = [&](std::size_t per_row, Lifetime life) {
      return RoundedOperand(reserve<std::uint16_t>(be, max_rows, per_row, life));
    };
    x_bf16_ = slot(input_shape().size(), Lifetime::kSaved);
    dy_bf16_ = slot(output_shape().size(), Lifetime::kPass);
    w_bf16_ = ParamOperand(be, arenas(), max_rows, weight_, params().front().count);
  }

  void init(std::uint64_t seed, bool next_rectifies, const ArenaPointers& host) const override {
    const double taps = std::pow(static_cast<double>(args_.kernel), geometry_.dims);
    const double fan_in = geometry_.in_channels * taps, fan_out = geometry_.out_channels * taps;
    const double limit =
        next_rectifies ? std::sqrt(6.0 / fan_in) : std::sqrt(6.0 / (fan_in + fan_out));
    Rng rng(mix_seed(seed, kConvInitPurpose, static_cast<std::uint64_t>(index_)));
    float* w = host.params + weight_;
    const std::size_t n = params().front().count;
    for (std::size_t i = 0; i < n; ++i)
      w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * limit);
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    plan_->forward(x_bf16_.round(be, x, x.count()), weight_operand(be), arenas().params + bias_,
                   y.data, x.rows);
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    plan_->backward_weights(x_bf16_.take(x.data), dy_bf16_.round(be, dy, dy.count()),
                            arenas().grads + weight_, arenas().grads + bias_, x.rows);
  }

  void backward_input(Backend& be, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    plan_->backward_data(dy_bf16_.take(dy.data), weight_operand(be), dx.data, dy.rows);
  }

 private:
  GemmOperand weight_operand(Backend& be) {
    return w_bf16_.operand(be, arenas().params + weight_, params().front().count);
  }
  static std::vector<std::size_t> weight_shape(const ConvGeometry& g) {
    std::vector<std::size_t> shape{std::size_t(g.out_channels), std::size_t(g.in_channels)};
    for (int d = 0; d < g.dims; ++d) shape.push_back(std::size_t(g.kernel[d]));
    return shape;
  }

  ConvArgs args_;
  ConvGeometry geometry_;
  int index_;
  std::size_t weight_, bias_;  // arena offsets
  std::unique_ptr<ConvPlan> plan_;
  // Where the backend rounds operands to bf16: x rounded in forward and
  // kept (for the weight gradient), dy in backward_params for both
  // gradients, each once a step; the weight's copy (ParamOperand).
  RoundedOperand x_bf16_, dy_bf16_;
  ParamOperand w_bf16_;
};

LayerSpec parse_conv(const std::string& token) {
  return {"conv", canonical_args(parse_conv_args(token_args(token))), token};
}

std::unique_ptr<Layer> make_conv(const LayerSpec& spec, const LayerContext& ctx) {
  ConvArgs args;
  try {
    args = parse_conv_args(spec.args);
  } catch (const BadLayerToken& e) {
    throw Error(ExitCode::kUsage, layer_label(spec, ctx) + ": " + e.what());
  }
  return std::make_unique<Conv>(ctx, args, conv_geometry(spec, ctx, args));
}

}  // namespace

LayerFamily conv_family() {
  return {{"conv"}, "conv:C:K[:S[:P]] (C, K, S >= 1; P >= 0)", parse_conv, make_conv, nullptr,
          ""};
}

}  // namespace dptrain
