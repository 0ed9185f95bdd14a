// Implements: the throughput row of dptrain_gpt_bench (see gpt_bench.hpp):
// tokens per second of the GPT's training step on one rank (CPU) or one
// GPU, and its model FLOP utilization (MFU) against a peak the caller
// names (--peak-tflops: the GPU's dense bf16 tensor-core peak, say).
//
// Model FLOPs per token (what the model needs, whatever the kernels do):
//   6 N + 12 L T D
// N: the parameters that enter a matrix product, forward (2 N: a multiply
// and an add per weight) and backward (4 N: the input's gradient and the
// weight's); every parameter but the token and position tables, which are
// looked up and added, not multiplied (the output head's matrix is not
// tied to the token table here, so it counts). Biases and layer-norm
// weights are in N as in the usual 6 N count; they are 0.1% of it.
// 12 L T D: attention's two batched products per layer, Q Kᵀ ([T, hd] by
// [hd, T] per head) and P V ([T, T] by [T, hd]): 2 T hd FLOPs per token and
// head each, 4 T D per token over the H heads (D = H hd); the backward
// pass has two products per forward one (dP = dO Vᵀ and dV = Pᵀ dO; dQ =
// dS K and dK = dSᵀ Q), 8 T D; 12 T D per token and layer, over the full
// T x T. A causal model needs only the lower half of the scores; the
// count keeps the full T, as the layers' batched GEMMs compute it (and as
// PaLM's 12 L H Q T does, appendix B), so a kernel that skips the masked
// half shows up as a higher MFU, never as more model FLOPs.
#include "gpt_bench.hpp"

namespace dptrain::bench {
namespace {

struct ModelFlops {
  std::size_t params = 0, matmul_params = 0;
  int attention_layers = 0;
  double attention = 0.0;  // FLOPs per token
  double per_token() const { return 6.0 * double(matmul_params) + attention; }
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

ModelFlops model_flops(const Model& m, int tokens) {
  ModelFlops f;
  f.params = m.num_params();
  f.matmul_params = f.params;
  for (std::size_t i = 0; i < m.num_layers(); ++i) {
    const Layer& l = m.layer(i);
    const std::string spec = l.spec();
    std::size_t own = 0;
    for (const ParamInfo& p : l.params()) own += p.count;
    if (spec.rfind("embed:", 0) == 0 || spec == "pos") f.matmul_params -= own;
    // Each attn inside this layer (a res block holds one) works on its
    // [T, D] input, as the block does.
    const int attn = count_of(spec, "attn:");
    if (attn > 0 && l.input_shape().rank() == 2) {
      f.attention_layers += attn;
      f.attention += attn * 12.0 * tokens * l.input_shape()[1];
    }
  }
  return f;
}

std::string fixed(double v, int digits) {
  char s[48];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

}  // namespace

Row throughput_row(Backend& real, const GptArgs& a) {
  Gpt gpt(real, a, 5);
  std::vector<double> warm;
  for (int i = 0; i < a.warmup; ++i) warm.push_back(device_ms(real, [&] { gpt.queue_step(); }));
  int repeats = a.repeats;
  if (repeats <= 0)  // about 3 s of steps, 5 to 100
    repeats = std::clamp(int(3e3 / std::max(warm.empty() ? 1.0 : median(warm), 1e-3)), 5, 100);
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) ms.push_back(device_ms(real, [&] { gpt.queue_step(); }));
  const double step_ms = median(ms);
  const double tokens = double(a.batch) * a.tokens, per_s = tokens / step_ms * 1e3;
  const ModelFlops f = model_flops(gpt.model, a.tokens);
  const double flops = f.per_token(), achieved = per_s * flops;
  const double mib = double(real.buffer_bytes()) / 1048576.0;

  nlohmann::json j{{"tokens_per_s", per_s}, {"step_ms", step_ms}, {"steps", repeats},
                   {"warmup", a.warmup}, {"batch", a.batch}, {"tokens", a.tokens},
                   {"params", f.params}, {"matmul_params", f.matmul_params},
                   {"attention_layers", f.attention_layers},
                   {"attention_flops_per_token", f.attention}, {"flops_per_token", flops},
                   {"achieved_tflops", achieved * 1e-12}, {"buffer_mib", mib},
                   {"peak_tflops", a.peak_tflops},
                   {"mfu", a.peak_tflops > 0 ? nlohmann::json(achieved / (a.peak_tflops * 1e12))
                                             : nlohmann::json(nullptr)}};
  std::printf("%s\n", nlohmann::json({{"gpt_throughput", j}}).dump().c_str());
  std::fflush(stdout);

  Row r;
  r.name = "GPT tokens/s and MFU (" + a.where() + ")";
  r.unit = "tokens/s";
  r.note = "ours = tokens/s of train_step (forward, xent over every position, backward, AdamW) of " +
           a.model + ", " + on_what(a, gpt.model) + ": median step " + fixed(step_ms, 2) +
           " ms of " + plural(repeats, "step") + " after " + plural(a.warmup, "warm-up step") +
           (real.caps().device_clock ? " (device time)" : "") + "; model FLOPs per token 6 N + 12 L T D = " +
           fixed(flops * 1e-6, 1) + " M (N = " + std::to_string(f.matmul_params) +
           " parameters in matrix products, the token and position tables left out; attention " +
           fixed(f.attention * 1e-6, 1) + " M over " + std::to_string(f.attention_layers) +
           " layers, full T x T), " + fixed(achieved * 1e-12, 2) + " TFLOPS achieved; device buffers " +
           fixed(mib / 1024.0, 2) + " GiB";
  if (a.peak_tflops <= 0) {
    r.status = "peak unknown";
    r.note += "; no --peak-tflops: MFU not computed";
    return r;
  }
  r.ours = per_s;
  r.baseline = a.peak_tflops * 1e12 / flops;
  r.ratio = per_s / r.baseline;
  r.note += "; baseline = the tokens/s of " + format_g(a.peak_tflops) +
            " TFLOPS (--peak-tflops) at these FLOPs per token; ratio = ours / baseline = MFU";
  return r;
}

}  // namespace dptrain::bench
