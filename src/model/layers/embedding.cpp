// Implements: the token embedding family, `embed:D` — token ids [N, T] of a
// vocabulary of V (the data's vocab_size) to [N, T, D], row ids[n, t] of a
// weight [V, D] (torch.nn.Embedding(V, D), initialized as torch does, from
// N(0, 1)). The ids arrive in the model's input buffer as int32 bit
// patterns (tensor.hpp), exact for any vocabulary. The weight's gradient
// sums the rows of repeated ids in a fixed order.
#include <cstdint>

#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

class Embedding final : public Layer {
 public:
  Embedding(const LayerContext& ctx, int dim)
      : Layer(ctx, Shape{ctx.input[0], dim}),
        vocab_(ctx.vocab),
        tokens_(ctx.input[0]),
        dim_(dim),
        index_(ctx.index),
        weight_(add_param("weight", {std::size_t(vocab_), std::size_t(dim_)})) {}

  std::string spec() const override { return "embed:" + std::to_string(dim_); }

  void allocate(Backend& be, int /*max_rows*/) override { be.kernels<SequenceKernels>(); }

  void init(std::uint64_t seed, bool, const ArenaPointers& host) const override {
    Rng rng(mix_seed(seed, kInitPurpose, kEmbedStream + static_cast<std::uint64_t>(index_)));
    float* w = host.params + weight_;
    for (std::size_t i = 0; i < std::size_t(vocab_) * std::size_t(dim_); ++i)
      w[i] = static_cast<float>(rng.normal());
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    be.kernels<SequenceKernels>().embed(token_ids(x), arenas().params + weight_, x.rows * tokens_,
                                        dim_, y.data);
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    be.kernels<SequenceKernels>().embed_grad(token_ids(x), dy.data, x.rows * tokens_, vocab_, dim_,
                                             arenas().grads + weight_);
  }

  // Ids have no gradient; the model never asks for one past its first
  // trained layer, and this layer is always first.
  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView,
                      TensorView dx) override {
    be.fill(dx.data, 0.0f, x.count());
  }

 private:
  // Init streams of this family start here, apart from the dense layers' 0, 1, ...
  static constexpr std::uint64_t kEmbedStream = 0x656d6200;  // "emb"

  static const std::int32_t* token_ids(ConstTensorView x) {
    return reinterpret_cast<const std::int32_t*>(x.data);
  }

  int vocab_, tokens_, dim_, index_;
  std::size_t weight_;
};

LayerSpec parse_embedding(const std::string& token) {
  const auto colon = token.find(':');
  if (colon == std::string::npos || token.substr(0, colon) != "embed")
    throw BadLayerToken("embed:D needs the width D");
  return {"embed", {std::to_string(parse_positive(token.substr(colon + 1), "width D"))}, token};
}

std::unique_ptr<Layer> make_embedding(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(ctx.vocab > 0 && ctx.input.rank() == 1, ExitCode::kUsage,
              "--model: " + layer_label(spec, ctx) +
                  " reads token ids, so it must be the first layer of a model trained on a "
                  "token set (/<set>/tokens with vocab_size)");
  return std::make_unique<Embedding>(ctx, std::stoi(spec.args.at(0)));
}

}  // namespace

LayerFamily embedding_family() {
  return {{"embed"}, "embed:D (D >= 1, first layer, token sets)", parse_embedding, make_embedding,
          nullptr, ""};
}

}  // namespace dptrain
