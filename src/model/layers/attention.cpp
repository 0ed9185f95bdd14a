// Implements: the multi-head self-attention family, `attn:H[:causal]`, as
// torch.nn.MultiheadAttention(D, H, batch_first=True) on a sequence
// [N, T, D]: qkv = x · in_proj_weightᵀ + in_proj_bias, split into H heads of
// D/H features; p = softmax(q kᵀ / sqrt(D/H) + mask) with mask −∞ above the
// diagonal when causal; o = p v, heads merged; y = o · out_proj.weightᵀ +
// out_proj.bias (plus a block's shortcut, added by that GEMM, as a block's
// last part). Two ways to compute the heads (`--attention`):
//  - fused, where the backend has FusedAttentionKernels for this head
//    dimension: one kernel reads q, k, v from qkv and writes the merged
//    heads, keeping only each row's log-sum-exp; backward recomputes the
//    tiles. Nothing of size T × T is held.
//  - math (the reference): the products over the N·H heads are single
//    batched GEMMs (Backend::gemm_batched) around the softmax kernels; the
//    forward keeps qkv's heads and p [N·H, T, T] for the backward pass.
// Backward writes every gradient in backward_params and keeps dqkv for the
// input gradient. Where the backend rounds GEMM operands to bf16
// (rounded_operand.hpp), each operand of two projection GEMMs is rounded
// once: x and merged in forward (kept for the weight gradients), dy and
// dqkv in backward, the weights in forward (kept for the input
// gradients); the fused kernels write merged's and dqkv's copies in
// the pass that writes them, so only the math path rounds those two.
// Where the fused kernels read qkv in bf16 (under --precision bf16), qkv,
// merged, merged's gradient and dqkv live in bf16 alone: their fp32 values
// are never made.
// Nothing allocates after allocate().
#include <cmath>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"
#include "model/layers/family.hpp"
#include "model/layers/rounded_operand.hpp"

namespace dptrain {
namespace {

class Attention final : public Layer {
 public:
  Attention(const LayerContext& ctx, int heads, bool causal)
      : Layer(ctx, ctx.input),
        tokens_(ctx.input[0]),
        dim_(ctx.input[1]),
        heads_(heads),
        head_dim_(dim_ / heads),
        causal_(causal),
        index_(ctx.index),
        in_weight_(add_param("in_proj_weight", {3 * std::size_t(dim_), std::size_t(dim_)})),
        in_bias_(add_param("in_proj_bias", {3 * std::size_t(dim_)})),
        out_weight_(add_param("out_proj/weight", {std::size_t(dim_), std::size_t(dim_)})),
        out_bias_(add_param("out_proj/bias", {std::size_t(dim_)})) {}

  std::string spec() const override {
    return "attn:" + std::to_string(heads_) + (causal_ ? ":causal" : "");
  }
  bool backward_reads_output() const override { return false; }
  // Where x is rounded, the input projection's weight gradient reads the
  // rounding kept.
  bool backward_reads_input() const override { return !x_bf16_.on(); }
  std::uint16_t* input_bf16() const override { return x_bf16_.slot(); }
  void implementations(std::vector<std::string>& out) const override {
    out.push_back(fused_ ? "attention fused" : "attention math");
  }

  void allocate(Backend& be, int max_rows) override {
    be.kernels<SequenceKernels>();
    fused_ = fused_kernels(be);
    bf16_alone_ = fused_ && fused_->reads_qkv_bf16() && RoundedOperand::wanted(be);
    // Per row (one sequence): its values, and the scores of every head.
    const std::size_t seq = std::size_t(tokens_) * dim_, scores = std::size_t(heads_) * tokens_ * tokens_;
    auto take = [&](ArenaBuffer<float>& b, std::size_t per_row, Lifetime life) {
      b = reserve<float>(be, max_rows, per_row, life);
    };
    if (bf16_alone_) {  // qkv in bf16; the fp32 scratch of the epilogue's fallback
      qkv16_ = reserve<std::uint16_t>(be, max_rows, 3 * seq, Lifetime::kSaved);
      qkv_ = reserve<float>(be, bf16_output_scratch_samples(3 * seq, max_rows), 3 * seq,
                            Lifetime::kPass);
      in_bias_bf16_ = ParamOperand(be, arenas(), max_rows, in_bias_, 3 * std::size_t(dim_));
      d_heads16_ = reserve<std::uint16_t>(be, max_rows, seq, Lifetime::kPass);
    } else {
      take(qkv_, 3 * seq, Lifetime::kSaved);
      take(merged_, seq, Lifetime::kSaved);
      take(dqkv_, 3 * seq, Lifetime::kPass);
      take(d_heads_, seq, Lifetime::kPass);
    }
    if (RoundedOperand::wanted(be)) {
      auto slot = [&](std::size_t per_row, Lifetime life) {
        return RoundedOperand(reserve<std::uint16_t>(be, max_rows, per_row, life));
      };
      x_bf16_ = slot(seq, Lifetime::kSaved);
      merged_bf16_ = slot(seq, Lifetime::kSaved);
      dy_bf16_ = slot(seq, Lifetime::kPass);
      dqkv_bf16_ = slot(3 * seq, Lifetime::kPass);
      in_w_bf16_ = ParamOperand(be, arenas(), max_rows, in_weight_, 3 * std::size_t(dim_) * dim_);
      out_w_bf16_ = ParamOperand(be, arenas(), max_rows, out_weight_, std::size_t(dim_) * dim_);
    }
    if (fused_) {
      const std::size_t row_stats = std::size_t(heads_) * tokens_;
      take(lse_, row_stats, Lifetime::kSaved);
      take(rowdot_, row_stats, Lifetime::kPass);
      return;
    }
    for (ArenaBuffer<float>* b : {&q_, &k_, &v_}) take(*b, seq, Lifetime::kSaved);
    take(p_, scores, Lifetime::kSaved);
    for (ArenaBuffer<float>* b : {&heads_out_, &dq_, &dk_, &dv_}) take(*b, seq, Lifetime::kPass);
    take(dp_, scores, Lifetime::kPass);
  }

  // torch's _reset_parameters: Xavier-uniform in_proj_weight, zero biases;
  // out_proj.weight as a Glorot-uniform square.
  void init(std::uint64_t seed, bool, const ArenaPointers& host) const override {
    Rng rng(mix_seed(seed, kInitPurpose, kAttentionStream + static_cast<std::uint64_t>(index_)));
    const std::size_t d = static_cast<std::size_t>(dim_);
    fill_uniform(rng, host.params + in_weight_, 3 * d * d, std::sqrt(6.0 / (4.0 * dim_)));
    fill_uniform(rng, host.params + out_weight_, d * d, std::sqrt(6.0 / (2.0 * dim_)));
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode) override {
    project(be, x, y, nullptr);
  }
  // As a block's last part: the shortcut added in the output projection's
  // epilogue.
  bool forward_adds() const override { return true; }
  void forward_adding(Backend& be, ConstTensorView x, ConstTensorView add, TensorView y,
                      Mode) override {
    project(be, x, y, add.data);
  }

  // y = the attention of x, plus add where not null.
  void project(Backend& be, ConstTensorView x, TensorView y, const float* add) {
    const int rows = x.rows * tokens_, d = dim_;
    const float* p = arenas().params;
    const std::size_t n = std::size_t(rows) * d;
    const GemmOperand x_op = x_bf16_.round(be, x, n);
    const GemmOperand w_op = in_weight_operand(be);
    if (bf16_alone_) {  // qkv = bf16(x W_inᵀ + b_in), written in bf16 alone
      const std::size_t per_sample = 3 * std::size_t(tokens_) * d;
      const int scratch_rows = bf16_output_scratch_samples(per_sample, x.rows) * tokens_;
      be.gemm_epilogue_bf16(Backend::GemmEpilogue::kBias, false, true, rows, 3 * d, d, x_op, d,
                            w_op, d, qkv16_.get(), 3 * d, nullptr, p + in_bias_,
                            in_bias_bf16_.operand(be, p + in_bias_, 3 * std::size_t(d)).bf16,
                            qkv_.get(), nullptr, scratch_rows);
    } else {
      be.gemm_epilogue(false, true, rows, 3 * d, d, x_op, d, w_op, d, qkv_.get(), 3 * d,
                       Backend::GemmEpilogue::kBias, arenas().params + in_bias_);
    }
    GemmOperand merged_op = merged_.get();
    if (bf16_alone_) {  // merged in bf16 alone
      fused_->forward(qkv_operand(), shape(x.rows), scale(), causal_, nullptr, lse_.get(),
                      merged_bf16_.slot());
      merged_op = {nullptr, merged_bf16_.slot()};
    } else if (fused_) {  // the kernels write merged's bf16 copy themselves
      fused_->forward(qkv_operand(), shape(x.rows), scale(), causal_, merged_.get(), lse_.get(),
                      merged_bf16_.slot_for(merged_.get()));
      merged_op = merged_bf16_.held(merged_.get());
    } else {
      math_heads(be, x.rows);
      merged_op = merged_bf16_.round(be, merged_.get(), n);
    }
    be.gemm_epilogue(false, true, rows, d, d, merged_op, d,
                     out_weight_operand(be), d, y.data, d,
                     add ? Backend::GemmEpilogue::kBiasAdd : Backend::GemmEpilogue::kBias,
                     arenas().params + out_bias_, const_cast<float*>(add));
  }

  // merged = the heads of qkv through the materialized weights p_.
  void math_heads(Backend& be, int batch) {
    SequenceKernels& seq = be.kernels<SequenceKernels>();
    const HeadShape s = shape(batch);
    const int t = tokens_, hd = head_dim_;
    seq.split_qkv(qkv_.get(), s, q_.get(), k_.get(), v_.get());
    const int nh = batch * heads_;
    const std::size_t th = std::size_t(t) * hd, tt = std::size_t(t) * t;
    be.gemm_batched(false, true, t, t, hd, 1.0f, q_.get(), hd, th, k_.get(), hd, th, 0.0f,
                    p_.get(), t, tt, nh);
    seq.attention_softmax(p_.get(), s, scale(), causal_, p_.get());
    be.gemm_batched(false, false, t, hd, t, 1.0f, p_.get(), t, tt, v_.get(), hd, th, 0.0f,
                    heads_out_.get(), hd, th, nh);
    seq.merge_heads(heads_out_.get(), s, merged_.get());
  }

  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    const int rows = x.rows * tokens_, d = dim_;
    float* g = arenas().grads;
    // Output projection: its gradients, and the gradient of the merged heads
    // (over merged itself on the math path, which no longer needs it).
    const GemmOperand dy_op = dy_bf16_.round(be, dy, std::size_t(rows) * d);
    const GemmOperand merged_op = bf16_alone_ ? GemmOperand(nullptr, merged_bf16_.slot())
                                              : merged_bf16_.take(merged_.get());
    be.gemm_epilogue(true, false, d, d, rows, dy_op, d, merged_op, d, g + out_weight_, d,
                     Backend::GemmEpilogue::kBiasGradA, g + out_bias_);
    float* d_merged = fused_ ? d_heads_.get() : merged_.get();
    const GemmOperand dy_again = dy_bf16_.take(dy.data);
    const GemmOperand w_out = out_weight_operand(be);
    GemmOperand d_merged_op = d_merged;
    if (bf16_alone_) {  // in bf16 alone, as the kernels read it; qkv_: the fallback's scratch
      const std::size_t per_sample = 3 * std::size_t(tokens_) * d;
      const int scratch_rows = bf16_output_scratch_samples(per_sample, x.rows) * tokens_;
      be.gemm_epilogue_bf16(Backend::GemmEpilogue::kNone, false, false, rows, d, d, dy_again, d,
                            w_out, d, d_heads16_.get(), d, nullptr, nullptr, nullptr, qkv_.get(),
                            nullptr, scratch_rows);
      d_merged_op = {nullptr, d_heads16_.get()};
    } else {
      be.gemm(false, false, rows, d, d, 1.0f, dy_again, d, w_out, d, 0.0f, d_merged, d);
    }
    // Input projection: dqkv and, from the fused kernels, its bf16 copy
    // (or the copy alone).
    GemmOperand dqkv_op = dqkv_.get();
    if (bf16_alone_) {
      fused_->backward(qkv_operand(), nullptr, lse_.get(), d_merged_op, shape(x.rows), scale(),
                       causal_, rowdot_.get(), nullptr, merged_op.bf16, dqkv_bf16_.slot());
      dqkv_op = {nullptr, dqkv_bf16_.slot()};
    } else if (fused_) {
      fused_->backward(qkv_operand(), merged_.get(), lse_.get(), d_merged, shape(x.rows),
                       scale(), causal_, rowdot_.get(), dqkv_.get(), merged_op.bf16,
                       dqkv_bf16_.slot_for(dqkv_.get()));
      dqkv_op = dqkv_bf16_.held(dqkv_.get());
    } else {
      math_heads_grad(be, x.rows);
      dqkv_op = dqkv_bf16_.round(be, dqkv_.get(), std::size_t(rows) * 3 * d);
    }
    be.gemm_epilogue(true, false, 3 * d, d, rows, dqkv_op, 3 * d, x_bf16_.take_kept(x.data), d,
                     g + in_weight_, d,
                     Backend::GemmEpilogue::kBiasGradA, g + in_bias_);
  }

  // dqkv from the merged heads' gradient (in merged_) through p_.
  void math_heads_grad(Backend& be, int batch) {
    SequenceKernels& seq = be.kernels<SequenceKernels>();
    const HeadShape s = shape(batch);
    const int t = tokens_, hd = head_dim_, nh = batch * heads_;
    const std::size_t th = std::size_t(t) * hd, tt = std::size_t(t) * t;
    seq.split_heads(merged_.get(), s, d_heads_.get());
    // o = p v: dp = do vᵀ, dv = pᵀ do; then the softmax; dq = ds k, dk = dsᵀ q.
    be.gemm_batched(false, true, t, t, hd, 1.0f, d_heads_.get(), hd, th, v_.get(), hd, th, 0.0f,
                    dp_.get(), t, tt, nh);
    be.gemm_batched(true, false, t, hd, t, 1.0f, p_.get(), t, tt, d_heads_.get(), hd, th, 0.0f,
                    dv_.get(), hd, th, nh);
    seq.attention_softmax_grad(p_.get(), dp_.get(), s, scale(), dp_.get());
    be.gemm_batched(false, false, t, hd, t, 1.0f, dp_.get(), t, tt, k_.get(), hd, th, 0.0f,
                    dq_.get(), hd, th, nh);
    be.gemm_batched(true, false, t, hd, t, 1.0f, dp_.get(), t, tt, q_.get(), hd, th, 0.0f,
                    dk_.get(), hd, th, nh);
    seq.join_qkv(dq_.get(), dk_.get(), dv_.get(), s, dqkv_.get());
  }

  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView,
                      TensorView dx) override {
    const int d = dim_;
    const GemmOperand dqkv_op = bf16_alone_ ? GemmOperand(nullptr, dqkv_bf16_.slot())
                                            : dqkv_bf16_.take(dqkv_.get());
    be.gemm(false, false, x.rows * tokens_, d, 3 * d, 1.0f, dqkv_op, 3 * d, in_weight_operand(be),
            d, 0.0f, dx.data, d);
  }

 private:
  static constexpr std::uint64_t kAttentionStream = 0x61746e00;  // "atn"

  static void fill_uniform(Rng& rng, float* w, std::size_t n, double limit) {
    for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * limit);
  }
  // The backend's fused kernels where it has them and they take this head
  // dimension; null for math. Error(kUsage) where --attention fused asked
  // for them by name and they do not take it.
  FusedAttentionKernels* fused_kernels(Backend& be) const {
    FusedAttentionKernels* fused = be.find_kernels<FusedAttentionKernels>();
    if (!fused) return nullptr;
    const std::string why = fused->unsupported(head_dim_);
    if (why.empty()) return fused;
    // The table's implementation() starts "cudnn" where --attention cudnn made it.
    const bool cudnn = fused->implementation().rfind("cudnn", 0) == 0;
    DPT_REQUIRE(!fused->requested(), ExitCode::kUsage,
                std::string("--attention ") + (cudnn ? "cudnn: " : "fused: ") + name() + ": " +
                    why + "; use --attention math or auto");
    return nullptr;
  }
  HeadShape shape(int rows) const { return {rows, tokens_, heads_, head_dim_}; }
  // The projections' weights as their GEMMs read them (ParamOperand).
  GemmOperand in_weight_operand(Backend& be) {
    return in_w_bf16_.operand(be, arenas().params + in_weight_, 3 * std::size_t(dim_) * dim_);
  }
  GemmOperand out_weight_operand(Backend& be) {
    return out_w_bf16_.operand(be, arenas().params + out_weight_, std::size_t(dim_) * dim_);
  }
  // qkv as the fused kernels read it: in bf16 alone where the layer keeps it so.
  GemmOperand qkv_operand() const {
    return bf16_alone_ ? GemmOperand(nullptr, qkv16_.get()) : GemmOperand(qkv_.get());
  }
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_))); }

  int tokens_, dim_, heads_, head_dim_;
  bool causal_;
  int index_;
  std::size_t in_weight_, in_bias_, out_weight_, out_bias_;
  FusedAttentionKernels* fused_ = nullptr;  // set by allocate(); null: math
  // Under bf16 with kernels that read it so: qkv kept in bf16 alone
  // (qkv16_; qkv_ is then the fp32 scratch of the epilogue's fallback), and
  // merged and dqkv too (in their bf16 slots; merged_ and dqkv_ are not
  // reserved): the projections' GEMMs read the copies alone; and merged's
  // gradient, which the output projection writes in bf16 alone for the
  // kernels (d_heads16_; d_heads_ is not reserved).
  bool bf16_alone_ = false;
  ArenaBuffer<std::uint16_t> qkv16_, d_heads16_;
  ParamOperand in_bias_bf16_;  // the input projection's bias as the bf16 epilogue takes it
  // Fused: qkv, merged (the output projection's input), each row's
  // log-sum-exp; in backward d_heads_ holds the merged heads' gradient,
  // rowdot_ Σ do ∘ o per row, dqkv the input projection's output gradient.
  // Math: qkv and its heads, p, the heads' outputs and merged (the output
  // projection's input; reused in backward for its gradient). Backward: the
  // heads' gradients, dp (then ds in place), dqkv (read by backward_input).
  // Saved from forward: qkv, merged, lse; q, k, v, p. Per pass: the rest.
  ArenaBuffer<float> qkv_, q_, k_, v_, p_, heads_out_, merged_;
  ArenaBuffer<float> d_heads_, dp_, dq_, dk_, dv_, dqkv_;
  ArenaBuffer<float> lse_, rowdot_;
  // Where the backend rounds operands: x and merged kept from forward, dy
  // and dqkv per pass; the two weights' copies (ParamOperand).
  RoundedOperand x_bf16_, merged_bf16_, dy_bf16_, dqkv_bf16_;
  ParamOperand in_w_bf16_, out_w_bf16_;
};

LayerSpec parse_attention(const std::string& token) {
  const auto colon = token.find(':');
  if (colon == std::string::npos || token.substr(0, colon) != "attn")
    throw BadLayerToken("attn:H[:causal] needs the number of heads H");
  std::string rest = token.substr(colon + 1);
  const auto second = rest.find(':');
  std::vector<std::string> args{std::to_string(parse_positive(rest.substr(0, second), "heads H"))};
  if (second != std::string::npos) {
    if (rest.substr(second + 1) != "causal") throw BadLayerToken("the option after H is 'causal'");
    args.push_back("causal");
  }
  return {"attn", args, token};
}

std::unique_ptr<Layer> make_attention(const LayerSpec& spec, const LayerContext& ctx) {
  const std::string label = "--model: " + layer_label(spec, ctx);
  DPT_REQUIRE(ctx.input.rank() == 2, ExitCode::kUsage,
              label + " needs a sequence [T, D] per sample; got " + ctx.input.to_string());
  const int heads = std::stoi(spec.args.at(0));
  DPT_REQUIRE(ctx.input[1] % heads == 0, ExitCode::kUsage,
              label + ": the width D = " + std::to_string(ctx.input[1]) +
                  " does not divide into " + std::to_string(heads) + " heads");
  return std::make_unique<Attention>(ctx, heads, spec.args.size() > 1);
}

}  // namespace

LayerFamily attention_family() {
  return {{"attn"}, "attn:H[:causal] (H divides D)", parse_attention, make_attention, nullptr, ""};
}

}  // namespace dptrain
