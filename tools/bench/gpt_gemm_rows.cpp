// Implements: the gemm row of dptrain_gpt_bench (see gpt_bench.hpp): one
// GPT train_step against every GEMM it makes, replayed bare.
#include "gpt_bench.hpp"

namespace dptrain::bench {

std::vector<GemmCall> record_step(InstrumentedBackend& inst, const GptArgs& a) {
  Gpt gpt(inst, a, 5);
  gpt.step();  // first step: primitives made
  inst.calls.clear();
  inst.record = true;
  gpt.step();
  inst.record = false;
  return std::move(inst.calls);
}

// Each distinct call, timed alone: {"gpt_gemm_calls": [{shape, count, ms, gflops}]}.
void print_calls(Replay& replay, const std::vector<GemmCall>& calls) {
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
    for (int r = 0; r < 15; ++r) {
      const auto t0 = Clock::now();
      replay.run(idx[0]);
      ms.push_back(ms_since(t0));
    }
    const GemmCall& g = calls[idx[0]];
    const double med = median(ms);
    out.push_back({{"shape", g.shape()}, {"count", idx.size()}, {"alpha", g.alpha},
                   {"beta", g.beta}, {"ms", med}, {"gflops", g.flops() / med * 1e-6}});
  }
  std::printf("%s\n", nlohmann::json({{"gpt_gemm_calls", out}}).dump().c_str());
  std::fflush(stdout);
}

Row gemm_row(Backend& real, const GptArgs& a, const std::vector<GemmCall>& calls, Replay& replay) {
  Gpt gpt(real, a, 5);
  long batched = 0;
  double flops = 0.0;
  for (const GemmCall& g : calls) {
    batched += g.batched;
    flops += g.flops();
  }
  const Side ours{nullptr, [&] {
                    const auto t0 = Clock::now();
                    gpt.step();
                    return ms_since(t0);
                  }};
  const Side base{nullptr, [&] {
                    const auto t0 = Clock::now();
                    replay.run_all();
                    return ms_since(t0);
                  }};
  const Samples s = alternate(MPI_COMM_SELF, a.repeats, {a.warmup, 6.0, 10, 200}, ours, base);
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.3g GFLOP, %.1f GFLOP/s in the step, %.1f bare", flops * 1e-9,
                flops / median(s.ours) * 1e-6, flops / median(s.base) * 1e-6);
  return make_row("GPT step vs bare GEMMs (1 rank, 1 thread)", s, ours_over_base, "<= 1.3",
                     "ours = train_step (forward, xent over every position, backward, AdamW with "
                     "clip-grad-norm " + format_g(a.clip) + ") of " + a.model +
                         ", " + on_what(a, gpt.model) + "; baseline = the " +
                         plural(static_cast<long>(calls.size()), "GEMM") + " of one step (" +
                         std::to_string(batched) + " of them batched over the heads), recorded "
                         "and replayed back to back through the same Backend (" +
                         real.gemm_library() + "), same shapes, strides, alpha and beta, "
                         "operands of their own; " + rate + "; ratio = ours / baseline");
}

}  // namespace dptrain::bench
