// Implements: the shape changes between images and sequences: `seq`, an
// image [N, C, H, W] (or volume [N, C, D, H, W]) read as the sequence
// [N, H·W, C] of its positions (x.flatten(2).transpose(1, 2), how a ViT
// turns strided-conv patches into tokens), and `gap` on a sequence
// [N, T, D]: the mean over positions, [N, D] (the pool family hands
// sequences to make_position_mean).
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

// The positions of a per-sample image shape {C, H, W} or {C, D, H, W}.
int positions_of(const Shape& s) {
  int n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return n;
}

class ImageToSequence final : public Layer {
 public:
  explicit ImageToSequence(const LayerContext& ctx)
      : Layer(ctx, Shape{positions_of(ctx.input), ctx.input[0]}),
        channels_(ctx.input[0]),
        positions_(positions_of(ctx.input)) {}

  std::string spec() const override { return "seq"; }
  void allocate(Backend& be, int) override { be.kernels<SequenceKernels>(); }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.kernels<SequenceKernels>().channels_last(x.data, x.rows, channels_, positions_, y.data);
  }
  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    be.kernels<SequenceKernels>().channels_first(dy.data, x.rows, channels_, positions_, dx.data);
  }

 private:
  int channels_, positions_;
};

class PositionMean final : public Layer {
 public:
  explicit PositionMean(const LayerContext& ctx)
      : Layer(ctx, Shape{ctx.input[1]}), tokens_(ctx.input[0]), dim_(ctx.input[1]) {}

  std::string spec() const override { return "gap"; }
  void allocate(Backend& be, int) override { be.kernels<SequenceKernels>(); }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.kernels<SequenceKernels>().mean_positions(x.data, x.rows, tokens_, dim_, y.data);
  }
  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    be.kernels<SequenceKernels>().mean_positions_grad(dy.data, x.rows, tokens_, dim_, dx.data);
  }

 private:
  int tokens_, dim_;
};

LayerSpec parse_sequence(const std::string& token) {
  if (token != "seq") throw BadLayerToken("seq takes no arguments");
  return {"seq", {}, token};
}

std::unique_ptr<Layer> make_sequence(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(ctx.input.rank() >= 3, ExitCode::kUsage,
              "--model: " + layer_label(spec, ctx) +
                  " reads an image [C, H, W] or volume [C, D, H, W] as a sequence; got " +
                  ctx.input.to_string());
  return std::make_unique<ImageToSequence>(ctx);
}

}  // namespace

std::unique_ptr<Layer> make_position_mean(const LayerContext& ctx) {
  return std::make_unique<PositionMean>(ctx);
}

LayerFamily sequence_family() {
  return {{"seq"}, "seq", parse_sequence, make_sequence, nullptr, ""};
}

}  // namespace dptrain
