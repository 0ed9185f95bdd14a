// Implements: the pooling layer family — `maxpool:K[:S]` and
// `avgpool:K[:S]` over K×K (K×K×K) windows, stride S [K], no padding,
// floor (torch.nn.MaxPool2d / AvgPool2d defaults), and `gap`, global
// average pooling [N, C, ...] -> [N, C], which is an average pool whose
// window is the whole input. No parameters; the passes are the backend's
// pooling plan, made once at allocate (max pooling's workspace with it).
#include <algorithm>

#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "model/layers/spatial_shape.hpp"

namespace dptrain {
namespace {

struct PoolArgs {
  int window = 1, stride = 1;  // unused by gap
};

bool is_global(const std::string& kind) { return kind == "gap"; }

// Throws BadLayerToken with the reason.
PoolArgs parse_pool_args(const std::string& kind, const std::vector<std::string>& args) {
  if (is_global(kind)) {
    if (!args.empty()) throw BadLayerToken("gap takes no arguments");
    return {};
  }
  if (args.empty() || args.size() > 2) throw BadLayerToken(kind + " takes K[:S]");
  PoolArgs a;
  a.window = parse_spatial_arg(args[0], "window K", 1);
  a.stride = args.size() > 1 ? parse_spatial_arg(args[1], "stride S", 1) : a.window;
  return a;
}

std::vector<std::string> canonical_args(const std::string& kind, const PoolArgs& a) {
  if (is_global(kind)) return {};
  std::vector<std::string> args{std::to_string(a.window)};
  if (a.stride != a.window) args.push_back(std::to_string(a.stride));
  return args;
}

PoolGeometry pool_geometry(const LayerSpec& spec, const LayerContext& ctx, const PoolArgs& a) {
  const std::string label = layer_label(spec, ctx);
  PoolGeometry g;
  g.kind = spec.kind == "maxpool" ? PoolKind::kMax : PoolKind::kAvg;
  g.dims = spatial_rank(ctx.input, label);
  g.channels = ctx.input[0];
  g.input = spatial_extent(ctx.input);
  if (is_global(spec.kind)) {
    g.window = g.stride = g.input;
  } else {
    g.window = uniform_extent(a.window);
    g.stride = uniform_extent(a.stride);
  }
  for (int d = 0; d < g.dims; ++d) {
    DPT_REQUIRE(g.window[d] <= g.input[d], ExitCode::kUsage,
                label + ": window " + std::to_string(g.window[d]) +
                    " is larger than the input " + ctx.input.to_string());
    g.output[d] = (g.input[d] - g.window[d]) / g.stride[d] + 1;
  }
  return g;
}

class Pool final : public Layer {
 public:
  Pool(const LayerContext& ctx, std::string kind, const PoolArgs& args, const PoolGeometry& g)
      : Layer(ctx, is_global(kind) ? Shape{g.channels}
                                   : spatial_shape(g.channels, g.dims, g.output)),
        kind_(std::move(kind)),
        args_(args),
        geometry_(g) {}

  std::string spec() const override {
    std::string s = kind_;
    for (const std::string& a : canonical_args(kind_, args_)) s += ":" + a;
    return s;
  }

  void allocate(Backend& be, int max_rows) override {
    PoolGeometry g = geometry_;
    g.max_rows = std::max(1, max_rows);
    plan_ = plan_for(name(), [&] { return be.kernels<SpatialKernels>().pool_plan(g); });
  }

  void forward(Backend&, ConstTensorView x, TensorView y, Mode) override {
    plan_->forward(x.data, y.data, x.rows);
  }

  void backward_input(Backend&, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    plan_->backward(dy.data, dx.data, dy.rows);
  }

 private:
  std::string kind_;
  PoolArgs args_;
  PoolGeometry geometry_;
  std::unique_ptr<PoolPlan> plan_;
};

LayerSpec parse_pool(const std::string& token) {
  const std::string kind = token.substr(0, token.find(':'));
  return {kind, canonical_args(kind, parse_pool_args(kind, token_args(token))), token};
}

std::unique_ptr<Layer> make_pool(const LayerSpec& spec, const LayerContext& ctx) {
  if (is_global(spec.kind) && ctx.input.rank() == 2) return make_position_mean(ctx);
  PoolArgs args;
  try {
    args = parse_pool_args(spec.kind, spec.args);
  } catch (const BadLayerToken& e) {
    throw Error(ExitCode::kUsage, layer_label(spec, ctx) + ": " + e.what());
  }
  return std::make_unique<Pool>(ctx, spec.kind, args, pool_geometry(spec, ctx, args));
}

}  // namespace

LayerFamily pool_family() {
  return {{"maxpool", "avgpool", "gap"},
          "maxpool:K[:S], avgpool:K[:S] (K, S >= 1), gap",
          parse_pool,
          make_pool,
          nullptr,
          ""};
}

}  // namespace dptrain
