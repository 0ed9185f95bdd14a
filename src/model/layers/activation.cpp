// Implements: the activation layer family — relu, tanh, gelu (the erf form),
// gelu:tanh (the tanh approximation) and sigmoid — elementwise over any shape, through the backend's
// activation kernels. No parameters; backward reads the forward's input and
// output, which the model keeps.
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

constexpr Activation kActivations[] = {Activation::kRelu, Activation::kTanh, Activation::kGelu,
                                       Activation::kGeluTanh, Activation::kSigmoid};

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(const LayerContext& ctx, Activation f) : Layer(ctx, ctx.input), f_(f) {}

  std::string spec() const override { return activation_name(f_); }
  bool rectifies() const override {
    return f_ == Activation::kRelu || f_ == Activation::kGelu || f_ == Activation::kGeluTanh;
  }
  // tanh and sigmoid take the derivative from y, relu and gelu from x
  // (ActivationKernels::backward).
  bool backward_reads_output() const override { return from_output(); }
  bool backward_reads_input() const override { return !from_output(); }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.kernels<ActivationKernels>().forward(f_, x.data, y.data, x.count());
  }

  void backward_input(Backend& be, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                      TensorView dx) override {
    be.kernels<ActivationKernels>().backward(f_, x.data, y.data, dy.data, dx.data, x.count());
  }

 private:
  bool from_output() const { return f_ == Activation::kTanh || f_ == Activation::kSigmoid; }

  Activation f_;
};

// The activation a kind names; throws BadLayerToken for any other.
Activation activation_of(const std::string& kind) {
  for (Activation a : kActivations)
    if (kind == activation_name(a)) return a;
  throw BadLayerToken();
}

// "gelu:tanh" is kind gelu with the argument tanh: layers count as gelu.
LayerSpec parse_activation(const std::string& token) {
  activation_of(token);  // only the names above: "relu:2" names none
  const std::size_t colon = token.find(':');
  if (colon == std::string::npos) return {token, {}, token};
  return {token.substr(0, colon), {token.substr(colon + 1)}, token};
}

std::unique_ptr<Layer> make_activation(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(spec.args.size() <= 1, ExitCode::kUsage,
              "activation layer '" + spec.token + "' takes at most one argument");
  const std::string name = spec.args.empty() ? spec.kind : spec.kind + ":" + spec.args[0];
  try {
    return std::make_unique<ActivationLayer>(ctx, activation_of(name));
  } catch (const BadLayerToken&) {
    throw Error(ExitCode::kUsage, "'" + spec.token + "' is not an activation");
  }
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
    case Activation::kGeluTanh:
      return "gelu:tanh";
  }
  return "unknown";
}

LayerFamily activation_family() {
  std::vector<std::string> kinds;
  std::string usage;
  for (Activation a : kActivations) {
    const std::string name = activation_name(a);
    usage += (usage.empty() ? "" : ", ") + name;
    if (name.find(':') == std::string::npos) kinds.push_back(name);  // gelu:tanh is a gelu
  }
  return {kinds, usage, parse_activation, make_activation, nullptr, ""};
}

}  // namespace dptrain
