// Implements: the layer normalization family, `ln` — per position over the
// last dimension of a sequence [N, T, D], per sample on flat [N, F]:
// y = (x − μ) / sqrt(σ² + 1e-5) · weight + bias with the biased variance
// (torch.nn.LayerNorm(D): weight ones, bias zeros). The forward keeps each
// row's mean and 1/σ for the backward pass, and writes y's bf16 rounding
// too where the block hands it the next layer's slot (writes_output_bf16),
// alone where the next layer reads nothing else (output_read_in_bf16_only).
// As a block's first part its input gradient kernel also adds the
// shortcut's gradient and writes the copy (backward_input_adding).
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

constexpr float kEps = 1e-5f;

class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(const LayerContext& ctx)
      : Layer(ctx, ctx.input),
        positions_(ctx.input.rank() == 2 ? ctx.input[0] : 1),
        dim_(ctx.input[ctx.input.rank() - 1]),
        weight_(add_param("weight", {std::size_t(dim_)})),
        bias_(add_param("bias", {std::size_t(dim_)})) {}

  std::string spec() const override { return "ln"; }
  bool backward_reads_output() const override { return false; }  // x and its statistics
  bool writes_output_bf16() const override { return true; }
  void output_read_in_bf16_only() override { bf16_only_ = true; }

  void allocate(Backend& be, int max_rows) override {
    const SequenceKernels* seq = &be.kernels<SequenceKernels>();
    mean_ = reserve<float>(be, max_rows, std::size_t(positions_), Lifetime::kSaved);
    rstd_ = reserve<float>(be, max_rows, std::size_t(positions_), Lifetime::kSaved);
    const int positions = positions_, dim = dim_;
    workspace_ = reserve_bytes<float>(
        be, max_rows,
        [seq, positions, dim](int rows) {
          return seq->layer_norm_workspace(rows * positions, dim) * sizeof(float);
        },
        Lifetime::kPass);
  }

  void init(std::uint64_t, bool, const ArenaPointers& host) const override {
    for (int c = 0; c < dim_; ++c) host.params[weight_ + std::size_t(c)] = 1.0f;
  }

  // Where the block said the next part reads the copy alone, y is written
  // as its bf16 rounding only.
  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    float* y32 = bf16_only_ && y.bf16 ? nullptr : y.data;
    be.kernels<SequenceKernels>().layer_norm(x.data, arenas().params + weight_,
                                             arenas().params + bias_, x.rows * positions_, dim_,
                                             kEps, y32, mean_.get(), rstd_.get(), y.bf16);
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    be.kernels<SequenceKernels>().layer_norm_param_grad(
        x.data, dy.data, mean_.get(), rstd_.get(), x.rows * positions_, dim_,
        arenas().grads + weight_, arenas().grads + bias_, workspace_.get());
  }

  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    input_grad(be, x, dy, dx.data, nullptr, nullptr);
  }
  // As the block's first part: the shortcut's gradient added, and the
  // copy written, in the kernel's pass.
  void backward_input_adding(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                             TensorView dx, ConstTensorView add) override {
    input_grad(be, x, dy, dx.data, add.data, dx.bf16);
  }

 private:
  void input_grad(Backend& be, ConstTensorView x, ConstTensorView dy, float* dx, const float* add,
                  std::uint16_t* dx_bf16) {
    be.kernels<SequenceKernels>().layer_norm_grad(x.data, dy.data, arenas().params + weight_,
                                                  mean_.get(), rstd_.get(), x.rows * positions_,
                                                  dim_, dx, add, dx_bf16);
  }

  int positions_, dim_;
  std::size_t weight_, bias_;
  ArenaBuffer<float> mean_, rstd_;  // per row of the last forward
  ArenaBuffer<float> workspace_;    // the parameter gradients' partial sums (CUDA)
  bool bf16_only_ = false;          // output_read_in_bf16_only() was said
};

LayerSpec parse_layer_norm(const std::string& token) {
  if (token != "ln") throw BadLayerToken("ln takes no arguments");
  return {"ln", {}, token};
}

std::unique_ptr<Layer> make_layer_norm(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(ctx.input.rank() <= 2, ExitCode::kUsage,
              "--model: " + layer_label(spec, ctx) +
                  " normalizes a sequence [T, D] per position or a flat [F] per sample; got " +
                  ctx.input.to_string() + " (use bn on images)");
  return std::make_unique<LayerNorm>(ctx);
}

}  // namespace

LayerFamily layer_norm_family() {
  return {{"ln"}, "ln", parse_layer_norm, make_layer_norm, nullptr, ""};
}

}  // namespace dptrain
