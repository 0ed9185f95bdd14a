// Implements: the flatten layer family, `flatten` — [N, C, ...] ->
// [N, C·...], the same values read as one feature vector per sample (on a
// flat input it changes nothing). The Model gives every layer its own
// output buffer, so this is a copy each way rather than a view.
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

class Flatten final : public Layer {
 public:
  explicit Flatten(const LayerContext& ctx) : Layer(ctx, ctx.input.flattened()) {}

  std::string spec() const override { return "flatten"; }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.copy_device(y.data, x.data, x.count() * sizeof(float));
  }

  void backward_input(Backend& be, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    be.copy_device(dx.data, dy.data, dy.count() * sizeof(float));
  }
};

LayerSpec parse_flatten(const std::string& token) {
  if (token != "flatten") throw BadLayerToken("flatten takes no arguments");
  return {"flatten", {}, token};
}

std::unique_ptr<Layer> make_flatten(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(spec.args.empty(), ExitCode::kUsage,
              "layer '" + spec.token + "' (" + ctx.name + "): flatten takes no arguments");
  return std::make_unique<Flatten>(ctx);
}

}  // namespace

LayerFamily flatten_family() {
  return {{"flatten"}, "flatten", parse_flatten, make_flatten, nullptr, ""};
}

}  // namespace dptrain
