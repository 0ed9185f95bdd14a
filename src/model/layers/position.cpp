// Implements: the learned position family, `pos` — adds row t of a weight
// [T, D] to position t of a sequence [N, T, D] (torch.nn.Embedding(T, D)
// of arange(T), initialized from N(0, 1) as torch does). The gradient of
// the weight sums over the shard's sequences in a fixed order.
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

class Position final : public Layer {
 public:
  explicit Position(const LayerContext& ctx)
      : Layer(ctx, ctx.input),
        tokens_(ctx.input[0]),
        dim_(ctx.input[1]),
        index_(ctx.index),
        weight_(add_param("weight", {std::size_t(tokens_), std::size_t(dim_)})) {}

  std::string spec() const override { return "pos"; }

  void allocate(Backend& be, int /*max_rows*/) override { be.kernels<SequenceKernels>(); }

  void init(std::uint64_t seed, bool, const ArenaPointers& host) const override {
    Rng rng(mix_seed(seed, kInitPurpose, kPositionStream + static_cast<std::uint64_t>(index_)));
    float* w = host.params + weight_;
    for (std::size_t i = 0; i < std::size_t(tokens_) * std::size_t(dim_); ++i)
      w[i] = static_cast<float>(rng.normal());
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.kernels<SequenceKernels>().add_positions(x.data, arenas().params + weight_, x.rows, tokens_,
                                                dim_, y.data);
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    be.kernels<SequenceKernels>().position_grad(dy.data, x.rows, tokens_, dim_,
                                                arenas().grads + weight_);
  }

  void backward_input(Backend& be, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    be.copy_device(dx.data, dy.data, dy.count() * sizeof(float));
  }

 private:
  static constexpr std::uint64_t kPositionStream = 0x706f7300;  // "pos"

  int tokens_, dim_, index_;
  std::size_t weight_;
};

LayerSpec parse_position(const std::string& token) {
  if (token != "pos") throw BadLayerToken("pos takes no arguments");
  return {"pos", {}, token};
}

std::unique_ptr<Layer> make_position(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(ctx.input.rank() == 2, ExitCode::kUsage,
              "--model: " + layer_label(spec, ctx) + " needs a sequence [T, D] per sample; got " +
                  ctx.input.to_string());
  return std::make_unique<Position>(ctx);
}

}  // namespace

LayerFamily position_family() {
  return {{"pos"}, "pos", parse_position, make_position, nullptr, ""};
}

}  // namespace dptrain
