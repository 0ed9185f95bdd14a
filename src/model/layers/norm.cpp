// Implements: the batch-norm layer family, `bn` and `bn:local` (docs/design.md
// section 2) — per channel on [N, C, ...] samples, per feature on flat ones,
// with torch.nn.BatchNorm*d's tensors (bn<i>/weight, bias, running_mean,
// running_var [C]), eps 1e-5 and momentum 0.1.
//
// `bn` normalizes with the statistics of the GLOBAL batch: each pass makes
// exactly one ReplicaSum call — forward: the per-channel shifted sums and
// sums of squares; backward: the two per-channel gradient sums (Σdy·x̂,
// Σdy). The weight and bias gradients this rank writes are its own shard's
// sums, which the gradient all-reduce adds up like every other gradient.
// A rank with an empty shard makes the same calls with zeros (forward_empty,
// backward_empty) and updates its running statistics from the same global
// sums, so every tower keeps identical buffers. `bn:local` uses the shard's
// own statistics, with no collective (torch DDP without SyncBatchNorm).
// A relu right after it in a chain of layers (the model's, a block's)
// runs in its passes (Layer::absorbs_next): forward writes relu's output
// alone, and backward takes relu's gradient from it, with the bits of the
// two layers' passes.
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.1f;
constexpr const char* kLocal = "local";

class BatchNorm final : public Layer {
 public:
  BatchNorm(const LayerContext& ctx, bool global)
      : Layer(ctx, ctx.input),
        global_(global),
        channels_(ctx.input[0]),
        spatial_(static_cast<int>(ctx.input.size() / static_cast<std::size_t>(ctx.input[0]))),
        weight_(add_param("weight", {std::size_t(channels_)})),
        bias_(add_param("bias", {std::size_t(channels_)})),
        running_mean_(add_buffer("running_mean", {std::size_t(channels_)})),
        running_var_(add_buffer("running_var", {std::size_t(channels_)})) {}

  std::string spec() const override { return global_ ? "bn" : std::string("bn:") + kLocal; }
  bool differs_in_eval() const override { return true; }
  bool communicates() const override { return global_; }

  void allocate(Backend& be, int /*max_rows*/) override {
    norm_ =
        &be.kernels<NormKernels>();  // a backend without these kernels says so here, at build time
    const auto c = static_cast<std::size_t>(channels_);
    mean_ = DeviceBuffer<float>(be, c);
    invstd_ = DeviceBuffer<float>(be, c);
    eval_invstd_ = DeviceBuffer<float>(be, c);
    sums_ = DeviceBuffer<float>(be, 2 * c);
  }

  void init(std::uint64_t, bool, const ArenaPointers& host) const override {
    // The arenas arrive zero-filled: bias and running_mean stay 0.
    for (int c = 0; c < channels_; ++c) {
      host.params[weight_ + c] = 1.0f;
      host.buffers[running_var_ + c] = 1.0f;
    }
  }

  void forward(Backend&, ConstTensorView x, TensorView y, Mode mode) override {
    normalized(x, y, mode, false);
  }
  // A relu after this layer runs in its passes: normalize writes relu(y),
  // and the gradients take relu's backward from that output (norm_kernels.hpp).
  bool absorbs_next(const Layer& next) const override { return next.spec() == "relu"; }
  void forward_absorbing_next(Backend&, ConstTensorView x, TensorView next_y,
                              Mode mode) override {
    normalized(x, next_y, mode, true);
  }
  void forward_empty(Backend&) override { batch_statistics(nullptr, 0); }

  // The backward collective is in backward_params (gradient_sums).
  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    gradient_sums(be, x, nullptr, dy);
  }
  void backward_params_absorbing_next(Backend& be, ConstTensorView x, ConstTensorView next_y,
                                      ConstTensorView next_dy) override {
    gradient_sums(be, x, next_y.data, next_dy);
  }
  void backward_empty(Backend& be) override {
    be.fill(sums_.get(), 0.0f, 2 * static_cast<std::size_t>(channels_));
    sum_over_replicas();
  }

  void backward_input(Backend&, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    input_gradient(x, nullptr, dy, dx);
  }
  void backward_input_absorbing_next(Backend&, ConstTensorView x, ConstTensorView next_y,
                                     ConstTensorView next_dy, TensorView dx) override {
    input_gradient(x, next_y.data, next_dy, dx);
  }

 private:
  NormShape shape(int rows) const { return {rows, channels_, spatial_}; }

  // y = the normalization of x (its relu with `relu`) in this mode.
  void normalized(ConstTensorView x, TensorView y, Mode mode, bool relu) {
    const float* mean = mean_.get();
    const float* invstd = invstd_.get();
    if (mode == Mode::kEval) {
      mean = arenas().buffers + running_mean_;
      norm_->inverse_std(arenas().buffers + running_var_, channels_, kEps, eval_invstd_.get());
      invstd = eval_invstd_.get();
    } else if (mode == Mode::kTrain) {
      batch_statistics(x.data, x.rows);
    }  // kRecompute: the statistics the training forward kept in mean_, invstd_
    norm_->normalize(x.data, shape(x.rows), mean, invstd, arenas().params + weight_,
                     arenas().params + bias_, relu, y.data);
  }

  // The collective of the backward pass happens here, since the model calls
  // backward_params for every layer with parameters (and backward_input only
  // for layers after the first one that has some); input_gradient reads its
  // result. dy is gated by a relu's output where gate is not null.
  void gradient_sums(Backend& be, ConstTensorView x, const float* gate, ConstTensorView dy) {
    norm_->grad_sums(x.data, gate, dy.data, shape(x.rows), mean_.get(), invstd_.get(),
                     sums_.get());
    // weight then bias, adjacent in the arena: the layout of sums_. The
    // arena gets this shard's sums; the replica sum works on sums_, which
    // input_gradient reads, since the gradient buckets may start reducing
    // the arena in place as soon as this returns.
    be.copy_device(arenas().grads + weight_, sums_.get(), 2 * channels_ * sizeof(float));
    sum_over_replicas();
  }

  void input_gradient(ConstTensorView x, const float* gate, ConstTensorView dy, TensorView dx) {
    norm_->input_grad(x.data, gate, dy.data, shape(x.rows), mean_.get(), invstd_.get(),
                      arenas().params + weight_, sums_.get(), batch_values(x.rows), dx.data);
  }

  bool over_replicas() const { return global_ && step().replicas; }

  // Values per channel in the batch the statistics cover: the global batch
  // for `bn` on several replicas, else this shard.
  double batch_values(int rows) const {
    std::uint64_t n = static_cast<std::uint64_t>(rows);
    if (over_replicas() && step().batch_rows) n = step().batch_rows;
    return static_cast<double>(n) * spatial_;
  }

  void sum_over_replicas() {
    if (over_replicas()) step().replicas->sum(sums_.get(), 2 * static_cast<std::size_t>(channels_));
  }

  // The batch mean and 1/std into mean_ and invstd_, and the running
  // statistics' update. The sums are shifted by the running mean, which
  // every replica holds bit for bit. Without replicas to sum over, sums and
  // statistics are one call (one launch on CUDA).
  void batch_statistics(const float* x, int rows) {
    float* running_mean = arenas().buffers + running_mean_;
    if (!over_replicas() && rows > 0) {
      norm_->batch_sums_and_stats(x, shape(rows), running_mean, batch_values(rows), kEps,
                                  kMomentum, sums_.get(), mean_.get(), invstd_.get(),
                                  running_mean, arenas().buffers + running_var_);
      return;
    }
    norm_->batch_sums(x, shape(rows), running_mean, sums_.get());
    sum_over_replicas();
    const double count = batch_values(rows);
    if (count == 0) return;  // no rows anywhere: nothing to normalize or learn
    norm_->batch_stats(sums_.get(), running_mean, channels_, count, kEps, kMomentum, mean_.get(),
                       invstd_.get(), running_mean, arenas().buffers + running_var_);
  }

  bool global_;
  int channels_, spatial_;
  std::size_t weight_, bias_, running_mean_, running_var_;  // arena offsets
  NormKernels* norm_ = nullptr;
  // The batch's statistics, kept from forward for backward; the eval
  // 1/std; the sums handed to the replicas (forward, then backward).
  DeviceBuffer<float> mean_, invstd_, eval_invstd_, sums_;
};

LayerSpec parse_bn(const std::string& token) {
  if (token == "bn") return {"bn", {}, token};
  if (token == std::string("bn:") + kLocal) return {"bn", {kLocal}, token};
  throw BadLayerToken("bn takes no argument but 'local', for each rank's own statistics");
}

std::unique_ptr<Layer> make_bn(const LayerSpec& spec, const LayerContext& ctx) {
  const bool local = spec.args.size() == 1 && spec.args[0] == kLocal;
  DPT_REQUIRE(spec.args.empty() || local, ExitCode::kUsage,
              "bn layer '" + spec.token + "': the only argument is 'local'");
  DPT_REQUIRE(ctx.input.rank() >= 1, ExitCode::kUsage,
              "bn layer '" + spec.token + "' needs an input with channels or features");
  DPT_REQUIRE(ctx.input.rank() != 2, ExitCode::kUsage,
              "bn layer '" + spec.token + "' (" + ctx.name + ") gets a sequence " +
                  ctx.input.to_string() + "; normalize sequences with ln");
  return std::make_unique<BatchNorm>(ctx, !local);
}

}  // namespace

LayerFamily norm_family() {
  return {{"bn"}, "bn, bn:local", parse_bn, make_bn, nullptr, ""};
}

}  // namespace dptrain
