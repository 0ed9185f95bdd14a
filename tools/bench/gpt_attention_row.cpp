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

}  // namespace

Row attention_row(Backend& be, const GptArgs& a, const AttentionShape& shape) {
  const int n = shape.batch, h = shape.heads, t = shape.tokens, hd = shape.head_dim, d = h * hd;
  const auto specs = parse_model_spec("attn:" + std::to_string(h) + ":causal,dense:1");
  LayerBuilder builder;
  const auto layer = builder.build(specs.front(), Shape{t, d});
  const std::size_t np = arena_size(layer->params());
  auto params = uploaded(be, random_values(np, 1, 0.05f));
  DeviceBuffer<float> grads(be, np);
  layer->bind({params.get(), grads.get(), nullptr});
  layer->allocate(be, n);
  std::vector<std::string> impl;
  layer->implementations(impl);

  const int rows = n * t;
  const std::size_t seq = std::size_t(rows) * d;
  auto x = uploaded(be, random_values(seq, 2, 1.0f)), dy = uploaded(be, random_values(seq, 3, 1.0f));
  DeviceBuffer<float> y(be, seq), dx(be, seq);
  // Where the backend rounds GEMM operands (bf16), x and dy come with their
  // bf16 copies, as a GPT block's layer norm and gradient sum hand them over.
  const bool rounds = be.caps().rounds_gemm_operands;
  const std::size_t copies = rounds ? seq : 0;
  DeviceBuffer<std::uint16_t> x16(be, copies), dy16(be, copies);
  if (rounds) {
    be.kernels<ConvertKernels>().to_bf16(x.get(), x16.get(), seq);
    be.kernels<ConvertKernels>().to_bf16(dy.get(), dy16.get(), seq);
  }
  const Shape s{t, d};
  const ConstTensorView xv(x.get(), n, s, x16.get()), dyv(dy.get(), n, s, dy16.get());
  const int repeats = a.repeats > 0 ? a.repeats : 20, warmup = std::max(1, a.warmup);
  const double layer_ms = median_ms(be, warmup, repeats, [&] {
    layer->forward(be, xv, {y.get(), n, s}, Mode::kTrain);
    layer->backward_params(be, xv, dyv);
    layer->backward_input(be, xv, {y.get(), n, s}, dyv, {dx.get(), n, s});
  });

  // The layer's six projection GEMMs (attention.cpp), alone, on its own
  // parameters and gradients as its ParamInfo places them.
  const auto offset = [&](const std::string& name) {
    for (const ParamInfo& p : layer->params())
      if (p.path() == layer->name() + "/" + name) return p.offset;
    throw Error(ExitCode::kOther, "the attention layer has no " + name);
  };
  float* w_in = params.get() + offset("in_proj_weight");
  float* b_in = params.get() + offset("in_proj_bias");
  float* w_out = params.get() + offset("out_proj/weight");
  float* b_out = params.get() + offset("out_proj/bias");
  float* g_w_in = grads.get() + offset("in_proj_weight");
  float* g_b_in = grads.get() + offset("in_proj_bias");
  float* g_w_out = grads.get() + offset("out_proj/weight");
  float* g_b_out = grads.get() + offset("out_proj/bias");
  DeviceBuffer<float> qkv(be, 3 * seq), merged(be, seq), out(be, seq);
  be.fill(qkv.get(), 0.0f, qkv.size());
  be.fill(merged.get(), 0.0f, merged.size());
  // Under bf16 the layer's GEMMs read bf16 operands that its producers
  // wrote (x, dy, qkv, the merged heads, dqkv: the last three by the
  // attention kernels) and the weights, which it rounds once a forward:
  // the GEMMs alone read the same, made before, the weights' roundings
  // made in the timed region as the layer makes them.
  DeviceBuffer<std::uint16_t> qkv16(be, 3 * copies), merged16(be, copies),
      w_in16(be, rounds ? 3 * std::size_t(d) * d : 0), w_out16(be, rounds ? std::size_t(d) * d : 0);
  if (rounds) {
    be.kernels<ConvertKernels>().to_bf16(qkv.get(), qkv16.get(), 3 * seq);
    be.kernels<ConvertKernels>().to_bf16(merged.get(), merged16.get(), seq);
  }
  const auto op = [&](const float* v, const DeviceBuffer<std::uint16_t>& copy) {
    return rounds ? GemmOperand(v, copy.get()) : GemmOperand(v);
  };
  using E = Backend::GemmEpilogue;
  const double proj_ms = median_ms(be, warmup, repeats, [&] {
    if (rounds) {
      be.kernels<ConvertKernels>().to_bf16(w_in, w_in16.get(), w_in16.size());
      be.kernels<ConvertKernels>().to_bf16(w_out, w_out16.get(), w_out16.size());
    }
    const GemmOperand w_in_op = op(w_in, w_in16), w_out_op = op(w_out, w_out16);
    be.gemm_epilogue(false, true, rows, 3 * d, d, op(x.get(), x16), d, w_in_op, d, qkv.get(),
                     3 * d, E::kBias, b_in);
    be.gemm_epilogue(false, true, rows, d, d, op(merged.get(), merged16), d, w_out_op, d,
                     out.get(), d, E::kBias, b_out);
    be.gemm_epilogue(true, false, d, d, rows, op(dy.get(), dy16), d, op(merged.get(), merged16),
                     d, g_w_out, d, E::kBiasGradA, g_b_out);
    if (rounds)  // the merged heads' gradient in bf16 alone, as the layer writes it
      be.gemm_epilogue_bf16(E::kNone, false, false, rows, d, d, op(dy.get(), dy16), d, w_out_op,
                            d, merged16.get(), d, nullptr, nullptr, nullptr, merged.get(),
                            nullptr);
    else
      be.gemm(false, false, rows, d, d, 1.0f, dy.get(), d, w_out, d, 0.0f, merged.get(), d);
    be.gemm_epilogue(true, false, 3 * d, d, rows, op(qkv.get(), qkv16), 3 * d, op(x.get(), x16),
                     d, g_w_in, d, E::kBiasGradA, g_b_in);
    be.gemm(false, false, rows, d, 3 * d, 1.0f, op(qkv.get(), qkv16), 3 * d, w_in_op, d, 0.0f,
            dx.get(), d);
  });

  std::string what = impl.empty() ? "attention" : impl.front();
  // Which kernels ran (--attention cudnn: cuDNN's, or fused-fallback).
  const auto* kernels = be.find_kernels<FusedAttentionKernels>();
  if (kernels && what == "attention fused") what = "attention " + kernels->implementation();
  Row r;
  r.name = "attention core fwd+bwd, one causal layer (N " + std::to_string(n) + ", H " +
           std::to_string(h) + ", T " + std::to_string(t) + ", hd " + std::to_string(hd) + "; " +
           what + ", " + a.where() + ")";
  r.ours = layer_ms - proj_ms;
  r.baseline = proj_ms;
  r.ratio = r.ours;
  r.target = "fused <= 0.9 ms, cudnn <= 0.45 ms at N 8, H 12, T 1024, hd 64 in bf16 on an H200";
  r.note = "result = ours = device ms of the layer's forward and backward (median " +
           fixed(layer_ms, 3) + " ms of " + std::to_string(repeats) +
           ") less its six projection GEMMs made alone (baseline, median " + fixed(proj_ms, 3) +
           " ms); device buffers " + fixed(double(be.buffer_bytes()) / 1048576.0, 1) + " MiB";
  return r;
}

}  // namespace dptrain::bench
