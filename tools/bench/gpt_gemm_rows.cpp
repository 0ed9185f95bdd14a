// Implements: the gemm row of dptrain_gpt_bench (see gpt_bench.hpp): one
// GPT train_step against every GEMM it makes, replayed bare, on the CPU
// backend or on CUDA (cuBLAS), each side timed on the device where the
// backend has a device clock (device_ms).
#include "gpt_bench.hpp"

namespace dptrain::bench {

std::vector<GemmCall> record_step(InstrumentedBackend& inst, Gpt& gpt) {
  gpt.step();  // first step: primitives made
  inst.calls.clear();
  inst.record = true;
  gpt.step();
  inst.record = false;
  return std::move(inst.calls);
}

// Each distinct call, timed alone (15 times, or --repeats from 3 to 15):
// {"gpt_gemm_calls": [{shape, count, ms, gflops}]}.
void print_calls(Backend& be, Replay& replay, const std::vector<GemmCall>& calls, int repeats) {
  const int times = repeats > 0 ? std::clamp(repeats, 3, 15) : 15;
  std::map<decltype(calls[0].key()), std::vector<std::size_t>> groups;
  std::vector<decltype(calls[0].key())> order;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    auto& g = groups[calls[i].key()];
    if (g.empty()) order.push_back(calls[i].key());
    g.push_back(i);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& key : order) {
    const std::vector<std::size_t>& idx = groups[key];
    std::vector<double> ms;
    for (int r = 0; r < times; ++r) ms.push_back(device_ms(be, [&] { replay.run(idx[0]); }));
    const GemmCall& g = calls[idx[0]];
    const double med = median(ms);
    out.push_back({{"shape", g.shape()}, {"count", idx.size()}, {"alpha", g.alpha},
                   {"beta", g.beta}, {"ms", med}, {"gflops", g.flops() / med * 1e-6}});
  }
  std::printf("%s\n", nlohmann::json({{"gpt_gemm_calls", out}}).dump().c_str());
  std::fflush(stdout);
}

// The step of `recorded` (the model the calls were recorded from, through
// the recording backend: one model in memory), or, without it, of a model
// of its own on `real`. CPU: ratio = step / GEMMs (target <= 1.3, docs/performance.md). GPU:
// ratio = GEMMs / step, the share of the step in cuBLAS (target >= 0.85,
// docs/gpu.md), as the CNN row of dptrain_bench.
Row gemm_row(Backend& real, const GptArgs& a, const std::vector<GemmCall>& calls, Replay& replay,
             Gpt* recorded) {
  std::unique_ptr<Gpt> own;
  if (!recorded) own = std::make_unique<Gpt>(real, a, 5);
  Gpt& gpt = recorded ? *recorded : *own;
  Backend& be = gpt.be;
  long batched = 0;
  double flops = 0.0;
  for (const GemmCall& g : calls) {
    batched += g.batched;
    flops += g.flops();
  }
  const Side ours{nullptr, [&] { return device_ms(be, [&] { gpt.queue_step(); }); }};
  const Side base{nullptr, [&] { return device_ms(real, [&] { replay.queue_all(); }); }};
  const Samples s = alternate(MPI_COMM_SELF, a.repeats, {a.warmup, 6.0, 10, 200}, ours, base);
  // The model's buffers count on the backend it was built on (the recording one, on a GPU).
  const std::size_t bytes = real.buffer_bytes() + (&be != &real ? be.buffer_bytes() : 0);
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.3g GFLOP, %.1f GFLOP/s in the step, %.1f bare", flops * 1e-9,
                flops / median(s.ours) * 1e-6, flops / median(s.base) * 1e-6);
  const std::string note =
      "ours = train_step (forward, xent over every position, backward, AdamW with "
      "clip-grad-norm " + format_g(a.clip) + ") of " + a.model + ", " + on_what(a, gpt.model) +
      "; baseline = the " + plural(static_cast<long>(calls.size()), "GEMM") + " of one step (" +
      std::to_string(batched) + " of them batched over the heads), recorded and replayed back to "
      "back through the same Backend (" + real.gemm_library() + "), same shapes, strides, alpha "
      "and beta, operands of their own" + (a.gpu() ? " (shared by the calls of one shape)" : "") +
      "; " + rate + "; device buffers " + format_g(double(bytes) / 1073741824.0) + " GiB" +
      (a.gpu() ? "; device time (events)" : "");
  if (a.gpu())
    return make_row("GPT step vs its GEMMs (" + a.where() + ", batch " + std::to_string(a.batch) +
                        " x " + std::to_string(a.tokens) + ")",
                    s, base_over_ours, ">= 0.85",
                    note + "; ratio = baseline / ours: the share of the step in the GEMMs");
  return make_row("GPT step vs bare GEMMs (" + a.where() + ")", s, ours_over_base, "<= 1.3",
                  note + "; ratio = ours / baseline");
}

}  // namespace dptrain::bench
