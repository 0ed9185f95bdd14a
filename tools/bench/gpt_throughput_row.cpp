// Implements: the throughput row of dptrain_gpt_bench (see gpt_bench.hpp):
// tokens per second of the GPT's training step on one rank (CPU) or one
// GPU, and its model FLOP utilization (MFU) against a peak the caller
// names (--peak-tflops: the GPU's dense bf16 tensor-core peak, say).
//
// Model FLOPs per token: 6 N + 12 L T D (dptrain/model/model_flops.hpp
// says what N, L, T and D are and why the full T x T counts).
#include "dptrain/model/model_flops.hpp"
#include "gpt_bench.hpp"

namespace dptrain::bench {
namespace {

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
