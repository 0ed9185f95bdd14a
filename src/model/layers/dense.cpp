// Implements: the dense layer family, `dense:N` — y = x · Wᵀ + b with
// torch.nn.Linear's layout (weight [out, in], bias [out]), a spatial input
// read as flat, a sequence [N, T, D] per position (on its last dimension,
// as torch.nn.Linear: [N, T, N_out]). Forward and backward are one GEMM each, the
// weight gradient a third, the bias and its gradient in the GEMMs' epilogues
// (Backend::gemm_epilogue). Where the backend rounds GEMM operands to bf16
// (rounded_operand.hpp), x and dy are each rounded once for the two
// products that read them (x: forward and the weight gradient, kept from
// forward; dy: both gradients), and the weight's copy is the model's bf16
// twin's (ParamOperand); a producer that writes the rounding itself (the
// loss, a layer norm or a block's gradient sum before it) hands it over in
// the view.
// Inside a block, where the backend fuses GEMM epilogues, a gelu:tanh
// after the layer is folded into its forward GEMM (bias, then GELU, the
// pre-activation kept for the activation's backward) and a gelu:tanh
// before it into its input gradient's GEMM (Layer::folds_next /
// folds_previous); as a block's last part it adds the block's shortcut in
// its forward GEMM's epilogue (forward_adding). As the model's head under
// bf16 it writes the logits in bf16 only (write_output_bf16_only). Init is
// He-uniform before a rectifier, else Glorot-uniform, with zero biases.
#include <charconv>
#include <cmath>

#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "model/layers/family.hpp"
#include "model/layers/rounded_operand.hpp"

namespace dptrain {
namespace {

// The N of "dense:N"; throws BadLayerToken with the reason.
int parse_units(const std::string& num) {
  int units = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), units);
  if (num.empty() || ec != std::errc() || end != num.data() + num.size())
    throw BadLayerToken("width must be an integer");
  if (units < 1) throw BadLayerToken("width must be >= 1");
  return units;
}

class Dense final : public Layer {
 public:
  Dense(const LayerContext& ctx, int units)
      : Layer(ctx, is_sequence(ctx.input) ? Shape{ctx.input[0], units} : Shape{units}),
        positions_(is_sequence(ctx.input) ? ctx.input[0] : 1),
        in_(is_sequence(ctx.input) ? ctx.input[1] : ctx.input.flattened()[0]),
        out_(units),
        index_(ctx.index),
        weight_(add_param("weight", {std::size_t(out_), std::size_t(in_)})),
        bias_(add_param("bias", {std::size_t(out_)})) {}

  std::string spec() const override { return "dense:" + std::to_string(out_); }
  bool backward_reads_output() const override { return false; }  // x, W and dy only
  // Where x is rounded, the weight gradient reads the rounding kept.
  bool backward_reads_input() const override { return !x_bf16_.on(); }
  std::uint16_t* output_grad_bf16() const override { return dy_bf16_.slot(); }
  std::uint16_t* input_bf16() const override { return x_bf16_.slot(); }

  // The model's head under bf16: the logits live in dy's slot from forward
  // to backward.
  bool write_output_bf16_only(Backend& be) override {
    output_bf16_ = RoundedOperand::wanted(be);
    return output_bf16_;
  }

  void allocate(Backend& be, int max_rows) override {
    folds_gelu_ = be.caps().fused_gemm_epilogues;
    if (!RoundedOperand::wanted(be)) return;
    x_bf16_ = RoundedOperand(
        reserve<std::uint16_t>(be, max_rows, std::size_t(positions_) * in_, Lifetime::kSaved));
    w_bf16_ = ParamOperand(be, arenas(), max_rows, weight_, std::size_t(in_) * out_);
    // Per pass even where it holds the logits from forward to backward:
    // between the head's forward and its backward only the loss runs.
    dy_bf16_ = RoundedOperand(
        reserve<std::uint16_t>(be, max_rows, std::size_t(positions_) * out_, Lifetime::kPass));
    if (folds_gelu_ || output_bf16_)  // the bias as the bf16 epilogues take it
      bias_bf16_ = ParamOperand(be, arenas(), max_rows, bias_, std::size_t(out_));
  }

  void init(std::uint64_t seed, bool next_rectifies, const ArenaPointers& host) const override {
    const double limit = next_rectifies ? std::sqrt(6.0 / in_) : std::sqrt(6.0 / (in_ + out_));
    // Seeded by the dense index alone, so a layer's draws do not depend on
    // the layers of other kinds around it.
    Rng rng(mix_seed(seed, kInitPurpose, static_cast<std::uint64_t>(index_)));
    float* w = host.params + weight_;
    const std::size_t n = static_cast<std::size_t>(in_) * out_;
    for (std::size_t i = 0; i < n; ++i)
      w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * limit);
  }

  bool folds_next(const Layer& next) const override { return folds_gelu_ && is_gelu_tanh(next); }
  bool folds_previous(const Layer& prev) const override {
    return folds_gelu_ && is_gelu_tanh(prev);
  }

  // Under write_output_bf16_only, y = x Wᵀ + b is written into dy's slot
  // in bf16 alone and y.data is the scratch of bf16_output_scratch_samples.
  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    if (!output_bf16_) return product(be, x, y.data, Backend::GemmEpilogue::kBias, nullptr);
    const int rows = x.rows * positions_;
    const float* bias = arenas().params + bias_;
    const GemmOperand bias16 = bias_bf16_.operand(be, bias, std::size_t(out_));
    const int scratch_rows =
        bf16_output_scratch_samples(std::size_t(positions_) * out_, x.rows) * positions_;
    be.gemm_epilogue_bf16(Backend::GemmEpilogue::kBias, false, true, rows, out_, in_,
                          x_bf16_.round(be, x, std::size_t(rows) * in_), in_, weight_operand(be),
                          in_, dy_bf16_.slot(), out_, nullptr, bias, bias16.bf16, y.data, nullptr,
                          scratch_rows);
  }
  // y = x Wᵀ + b + add in the GEMM's epilogue (a block's last part).
  bool forward_adds() const override { return !output_bf16_; }
  void forward_adding(Backend& be, ConstTensorView x, ConstTensorView add, TensorView y,
                      Mode) override {
    product(be, x, y.data, Backend::GemmEpilogue::kBiasAdd, const_cast<float*>(add.data));
  }
  // y = x Wᵀ + b, the gelu:tanh's input; next_y = gelu:tanh(y). Where the
  // block hands both over with bf16 slots (the bf16 MLP), they are written
  // in bf16 only, and y.data and next_y.data are scratch.
  void forward_folding_next(Backend& be, ConstTensorView x, TensorView y, TensorView next_y,
                            Mode) override {
    if (!y.bf16 || !next_y.bf16)
      return product(be, x, next_y.data, Backend::GemmEpilogue::kBiasGeluTanh, y.data);
    const int rows = x.rows * positions_;
    const float* bias = arenas().params + bias_;
    const GemmOperand bias16 = bias_bf16_.operand(be, bias, std::size_t(out_));
    be.gemm_epilogue_bf16(Backend::GemmEpilogue::kBiasGeluTanh, false, true, rows, out_, in_,
                          x_bf16_.round(be, x, std::size_t(rows) * in_), in_, weight_operand(be),
                          in_, next_y.bf16, out_, y.bf16, bias, bias16.bf16, next_y.data, y.data);
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    // dW[out,in] = dy^T [out,rows] . x [rows,in], db = dy's column sums
    const int rows = x.rows * positions_;
    const GemmOperand dy_op = dy_bf16_.round(be, dy, std::size_t(rows) * out_);
    be.gemm_epilogue(true, false, out_, in_, rows, dy_op, out_, x_bf16_.take_kept(x.data), in_,
                     arenas().grads + weight_, in_, Backend::GemmEpilogue::kBiasGradA,
                     arenas().grads + bias_);
  }

  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    // dx[rows,in] = dy [rows,out] . W [out,in]
    be.gemm(false, false, x.rows * positions_, in_, out_, 1.0f, dy_bf16_.take(dy.data), out_,
            weight_operand(be), in_, 0.0f, dx.data, in_);
  }
  // prev_dx = (dy W) ∘ gelu:tanh'(prev_x): through the activation before.
  // The bf16 MLP: prev_x comes as its bf16 copy alone (prev_x.data is
  // scratch) and prev_dx is written into prev_dx.bf16 alone.
  void backward_input_folding_previous(Backend& be, ConstTensorView x, ConstTensorView prev_x,
                                       ConstTensorView dy, TensorView prev_dx) override {
    const int rows = x.rows * positions_;
    const GemmOperand dy_op = dy_bf16_.take(dy.data);
    const GemmOperand w_op = weight_operand(be);
    float* aux = const_cast<float*>(prev_x.data);  // only read by this epilogue
    if (!prev_x.bf16 || !prev_dx.bf16)
      return be.gemm_epilogue(false, false, rows, in_, out_, dy_op, out_, w_op, in_, prev_dx.data,
                              in_, Backend::GemmEpilogue::kGeluTanhGrad, nullptr, aux);
    be.gemm_epilogue_bf16(Backend::GemmEpilogue::kGeluTanhGrad, false, false, rows, in_, out_,
                          dy_op, out_, w_op, in_, prev_dx.bf16, in_,
                          const_cast<std::uint16_t*>(prev_x.bf16), nullptr, nullptr, prev_dx.data,
                          aux);
  }

 private:
  // Sequences [T, D] are the per-sample shapes of rank 2 (tensor.hpp).
  static bool is_sequence(const Shape& s) { return s.rank() == 2; }
  static bool is_gelu_tanh(const Layer& l) { return l.spec() == "gelu:tanh"; }

  // out = x Wᵀ + b with the epilogue and its aux (a sequence's positions
  // are rows of the same products: rows = N · T).
  void product(Backend& be, ConstTensorView x, float* out, Backend::GemmEpilogue epilogue,
               float* aux) {
    const int rows = x.rows * positions_;
    const GemmOperand x_op = x_bf16_.round(be, x, std::size_t(rows) * in_);
    be.gemm_epilogue(false, true, rows, out_, in_, x_op, in_, weight_operand(be), in_, out, out_,
                     epilogue, arenas().params + bias_, aux);
  }
  // The weight as the GEMMs read it (ParamOperand).
  GemmOperand weight_operand(Backend& be) {
    return w_bf16_.operand(be, arenas().params + weight_, std::size_t(in_) * out_);
  }

  int positions_, in_, out_, index_;
  std::size_t weight_, bias_;  // arena offsets
  RoundedOperand x_bf16_;   // forward's rounding of x, for the weight gradient
  RoundedOperand dy_bf16_;  // backward_params' rounding of dy, for backward_input
  ParamOperand w_bf16_;     // the weight's rounding, for forward and the input gradient
  ParamOperand bias_bf16_;  // the bias's, for the bf16 epilogues (MLP, head)
  bool folds_gelu_ = false;  // the backend fuses GEMM epilogues (set by allocate)
  bool output_bf16_ = false;  // the model's head, writing the logits in bf16 only
};

LayerSpec parse_dense(const std::string& token) {
  const auto colon = token.find(':');
  if (colon == std::string::npos) throw BadLayerToken();
  return {"dense", {std::to_string(parse_units(token.substr(colon + 1)))}, token};
}

int units_of(const LayerSpec& spec) {
  try {
    DPT_REQUIRE(spec.args.size() == 1, ExitCode::kUsage, "dense takes one argument");
    return parse_units(spec.args[0]);
  } catch (const BadLayerToken& e) {
    throw Error(ExitCode::kUsage, "dense layer '" + spec.token + "': " + e.what());
  }
}

std::unique_ptr<Layer> make_dense(const LayerSpec& spec, const LayerContext& ctx) {
  return std::make_unique<Dense>(ctx, units_of(spec));
}

}  // namespace

LayerFamily dense_family() {
  return {{"dense"}, "dense:N (N >= 1)", parse_dense, make_dense, units_of, "dense:N"};
}

}  // namespace dptrain
