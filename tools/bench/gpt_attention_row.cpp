// Implements: the attention rows of dptrain_gpt_bench (see gpt_bench.hpp):
// one causal attn:H layer's forward and backward at a shape (batch N, H
// heads, T positions, head dimension hd) on the backend as --attention made
// it (math: the T x T weights through batched GEMMs; fused: the fused
// kernels; cudnn: cuDNN's SDPA, the row naming fused-fallback where cuDNN
// refused the shape), in device time on a GPU. The layer includes its input and
// output projections; the row's figure is the attention's core, the
// layer's time less the six projection GEMMs' (the same calls made alone,
// back to back, on operands of their own: under bf16 their bf16 copies,
// made before as the layer's producers make them, the weights rounded as
// the layer rounds them, and the merged heads' gradient written in bf16
// as the layer writes it), so that it compares with a bare
// scaled-dot-product attention (PyTorch's SDPA, in the GPU check).
#include "gpt_bench.hpp"

#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"

namespace dptrain::bench {
namespace {

std::vector<float> random_values(std::size_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

DeviceBuffer<float> uploaded(Backend& be, const std::vector<float>& host) {
  DeviceBuffer<float> buf(be, host.size());
  be.copy_to_device(buf.get(), host.data(), host.size() * sizeof(float));
  return buf;
}

// The median of `repeats` timings of fn after `warmup` untimed ones.
template <typename F>
double median_ms(Backend& be, int warmup, int repeats, F&& fn) {
  for (int i = 0; i < warmup; ++i) device_ms(be, fn);
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) ms.push_back(device_ms(be, fn));
  return median(ms);
}

std::string fixed(double v, int digits) {
  char s[48];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

// One causal attn:H layer at a shape, with its parameters, gradients,
// inputs (and their bf16 copies where the backend rounds GEMM operands, as
// a GPT block's layer norm and gradient sum hand them over) and outputs.
class AttentionBench {
 public:
  AttentionBench(Backend& be, const AttentionShape& shape)
      : be_(be), n_(shape.batch), d_(shape.heads * shape.head_dim), rows_(n_ * shape.tokens),
        seq_(std::size_t(rows_) * d_), rounds_(be.caps().rounds_gemm_operands), s_{shape.tokens, d_} {
    const auto specs = parse_model_spec("attn:" + std::to_string(shape.heads) + ":causal,dense:1");
    LayerBuilder builder;
    layer_ = builder.build(specs.front(), s_);
    const std::size_t np = arena_size(layer_->params());
    params_ = uploaded(be, random_values(np, 1, 0.05f));
    grads_ = DeviceBuffer<float>(be, np);
    layer_->bind({params_.get(), grads_.get(), nullptr});
    layer_->allocate(be, n_);
    x_ = uploaded(be, random_values(seq_, 2, 1.0f));
    dy_ = uploaded(be, random_values(seq_, 3, 1.0f));
    y_ = DeviceBuffer<float>(be, seq_);
    dx_ = DeviceBuffer<float>(be, seq_);
    x16_ = DeviceBuffer<std::uint16_t>(be, copies());
    dy16_ = DeviceBuffer<std::uint16_t>(be, copies());
    if (rounds_) {
      be.kernels<ConvertKernels>().to_bf16(x_.get(), x16_.get(), seq_);
      be.kernels<ConvertKernels>().to_bf16(dy_.get(), dy16_.get(), seq_);
    }
  }

  // What the layer says it runs ("attention fused", ...).
  std::string implementation() const {
    std::vector<std::string> impl;
    layer_->implementations(impl);
    return impl.empty() ? "attention" : impl.front();
  }

  // The layer's forward and backward, median device ms.
  double layer_ms(int warmup, int repeats) {
    const ConstTensorView xv(x_.get(), n_, s_, x16_.get()), dyv(dy_.get(), n_, s_, dy16_.get());
    return median_ms(be_, warmup, repeats, [&] {
      layer_->forward(be_, xv, {y_.get(), n_, s_}, Mode::kTrain);
      layer_->backward_params(be_, xv, dyv);
      layer_->backward_input(be_, xv, {y_.get(), n_, s_}, dyv, {dx_.get(), n_, s_});
    });
  }

  // The layer's six projection GEMMs (attention.cpp), alone, on its own
  // parameters and gradients as its ParamInfo places them, median device ms;
  // notes the device buffers then, the layer's and the GEMMs' (held_bytes).
  // Under bf16 the layer's GEMMs read bf16 operands that its producers
  // wrote (x, dy, qkv, the merged heads, dqkv: the last three by the
  // attention kernels) and the weights, which it rounds once a forward:
  // the GEMMs alone read the same, made before, the weights' roundings
  // made in the timed region as the layer makes them.
  double projections_ms(int warmup, int repeats) {
    const int rows = rows_, d = d_;
    float* w_in = at(params_, "in_proj_weight");
    float* w_out = at(params_, "out_proj/weight");
    DeviceBuffer<float> qkv(be_, 3 * seq_), merged(be_, seq_), out(be_, seq_);
    be_.fill(qkv.get(), 0.0f, qkv.size());
    be_.fill(merged.get(), 0.0f, merged.size());
    DeviceBuffer<std::uint16_t> qkv16(be_, 3 * copies()), merged16(be_, copies()),
        w_in16(be_, rounds_ ? 3 * std::size_t(d) * d : 0), w_out16(be_, rounds_ ? std::size_t(d) * d : 0);
    if (rounds_) {
      be_.kernels<ConvertKernels>().to_bf16(qkv.get(), qkv16.get(), 3 * seq_);
      be_.kernels<ConvertKernels>().to_bf16(merged.get(), merged16.get(), seq_);
    }
    const auto op = [&](const float* v, const DeviceBuffer<std::uint16_t>& copy) {
      return rounds_ ? GemmOperand(v, copy.get()) : GemmOperand(v);
    };
    using E = Backend::GemmEpilogue;
    Backend& be = be_;
    const double ms = median_ms(be, warmup, repeats, [&] {
      if (rounds_) {
        be.kernels<ConvertKernels>().to_bf16(w_in, w_in16.get(), w_in16.size());
        be.kernels<ConvertKernels>().to_bf16(w_out, w_out16.get(), w_out16.size());
      }
      const GemmOperand w_in_op = op(w_in, w_in16), w_out_op = op(w_out, w_out16);
      const GemmOperand x = op(x_.get(), x16_), dy = op(dy_.get(), dy16_);
      be.gemm_epilogue(false, true, rows, 3 * d, d, x, d, w_in_op, d, qkv.get(), 3 * d, E::kBias,
                       at(params_, "in_proj_bias"));
      be.gemm_epilogue(false, true, rows, d, d, op(merged.get(), merged16), d, w_out_op, d,
                       out.get(), d, E::kBias, at(params_, "out_proj/bias"));
      be.gemm_epilogue(true, false, d, d, rows, dy, d, op(merged.get(), merged16), d,
                       at(grads_, "out_proj/weight"), d, E::kBiasGradA, at(grads_, "out_proj/bias"));
      if (rounds_)  // the merged heads' gradient in bf16 alone, as the layer writes it
        be.gemm_epilogue_bf16(E::kNone, false, false, rows, d, d, dy, d, w_out_op, d,
                              merged16.get(), d, nullptr, nullptr, nullptr, merged.get(), nullptr);
      else
        be.gemm(false, false, rows, d, d, 1.0f, dy_.get(), d, w_out, d, 0.0f, merged.get(), d);
      be.gemm_epilogue(true, false, 3 * d, d, rows, op(qkv.get(), qkv16), 3 * d, x, d,
                       at(grads_, "in_proj_weight"), d, E::kBiasGradA, at(grads_, "in_proj_bias"));
      be.gemm(false, false, rows, d, 3 * d, 1.0f, op(qkv.get(), qkv16), 3 * d, w_in_op, d, 0.0f,
              dx_.get(), d);
    });
    held_bytes_ = be.buffer_bytes();
    return ms;
  }

  std::size_t held_bytes() const { return held_bytes_; }

 private:
  std::size_t copies() const { return rounds_ ? seq_ : 0; }
  // The layer's tensor `name` in the parameter or gradient arena.
  float* at(DeviceBuffer<float>& arena, const std::string& name) const {
    for (const ParamInfo& p : layer_->params())
      if (p.path() == layer_->name() + "/" + name) return arena.get() + p.offset;
    throw Error(ExitCode::kOther, "the attention layer has no " + name);
  }

  Backend& be_;
  const int n_, d_, rows_;
  const std::size_t seq_;
  const bool rounds_;
  const Shape s_;
  std::unique_ptr<Layer> layer_;
  DeviceBuffer<float> params_, grads_, x_, dy_, y_, dx_;
  DeviceBuffer<std::uint16_t> x16_, dy16_;
  std::size_t held_bytes_ = 0;
};

}  // namespace

Row attention_row(Backend& be, const GptArgs& a, const AttentionShape& shape) {
  AttentionBench bench(be, shape);
  const int repeats = a.repeats > 0 ? a.repeats : 20, warmup = std::max(1, a.warmup);
  const double layer_ms = bench.layer_ms(warmup, repeats);
  const double proj_ms = bench.projections_ms(warmup, repeats);

  std::string what = bench.implementation();
  // Which kernels ran (--attention cudnn: cuDNN's, or fused-fallback).
  const auto* kernels = be.find_kernels<FusedAttentionKernels>();
  if (kernels && what == "attention fused") what = "attention " + kernels->implementation();
  Row r;
  r.name = "attention core fwd+bwd, one causal layer (N " + std::to_string(shape.batch) + ", H " +
           std::to_string(shape.heads) + ", T " + std::to_string(shape.tokens) + ", hd " +
           std::to_string(shape.head_dim) + "; " + what + ", " + a.where() + ")";
  r.ours = layer_ms - proj_ms;
  r.baseline = proj_ms;
  r.ratio = r.ours;
  r.target = "fused <= 0.9 ms, cudnn <= 0.45 ms at N 8, H 12, T 1024, hd 64 in bf16 on an H200";
  r.note = "result = ours = device ms of the layer's forward and backward (median " +
           fixed(layer_ms, 3) + " ms of " + std::to_string(repeats) +
           ") less its six projection GEMMs made alone (baseline, median " + fixed(proj_ms, 3) +
           " ms); device buffers " + fixed(double(bench.held_bytes()) / 1048576.0, 1) + " MiB";
  return r;
}

}  // namespace dptrain::bench
