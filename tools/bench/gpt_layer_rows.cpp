// Implements: the layers row of dptrain_gpt_bench (see gpt_bench.hpp): the
// GPT's step driven layer by layer, timed per layer family: on the host
// clock on the CPU, by device markers around each call (and each GEMM in
// it) where the backend has a device clock (a GPU).
#include "driven_gpt.hpp"

namespace dptrain::bench {
namespace {

std::string format_ms(double ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g ms", ms);
  return s;
}

// The timed steps' per-family accumulations, with each step's time.
struct Measured {
  std::vector<Accs> steps;
  std::vector<double> step_ms;
  // The median over the steps of f(step's accumulations, step index).
  template <typename F>
  double per_step(F f) const {
    std::vector<double> v;
    for (std::size_t r = 0; r < steps.size(); ++r) v.push_back(f(steps[r], r));
    return median(v);
  }
  double family_ms(int f) const {
    return per_step([&](const Accs& x, std::size_t) { return x[f].total(); });
  }
  double share(int f) const {
    return per_step([&](const Accs& x, std::size_t r) { return x[f].total() / step_ms[r]; });
  }
  // Whether family f shows: it took time, or it was folded into others' calls.
  bool shows(int f) const { return family_ms(f) > 0.0 || steps.front()[f].folded; }
};

// The same figures as the rows, as one JSON line for the results' breakdown
// table: {"gpt_families": [{family, ms, share, forward_ms, backward_ms,
// update_ms, gemm_ms, gemm_calls, batched_ms, batched_calls, folded_calls}],
// "step_ms", "train_step_ms"}; folded_calls: calls made inside another
// family's GEMMs.
void print_families_json(const Measured& m, double step_ms, double train_step_ms, int repeats) {
  nlohmann::json families = nlohmann::json::array();
  for (int f = 0; f < kFamilies; ++f) {
    if (!m.shows(f)) continue;
    auto med = [&](auto g) { return m.per_step([&](const Accs& x, std::size_t) { return g(x[f]); }); };
    const Acc& first = m.steps.front()[f];
    families.push_back({{"family", kFamilyNames[f]},
                        {"ms", m.family_ms(f)},
                        {"share", m.share(f)},
                        {"forward_ms", med([](const Acc& x) { return x.ms[kForward]; })},
                        {"backward_ms", med([](const Acc& x) { return x.ms[kBackward]; })},
                        {"update_ms", med([](const Acc& x) { return x.ms[kUpdate]; })},
                        {"gemm_ms", med([](const Acc& x) { return x.gemm_ms; })},
                        {"gemm_calls", first.gemm_calls},
                        {"batched_ms", med([](const Acc& x) { return x.batched_ms; })},
                        {"batched_calls", first.batched_calls},
                        {"folded_calls", first.folded}});
  }
  std::printf("%s\n", nlohmann::json({{"gpt_families", families},
                                      {"step_ms", step_ms},
                                      {"train_step_ms", train_step_ms},
                                      {"repeats", repeats}})
                          .dump()
                          .c_str());
  std::fflush(stdout);
}

// What family f's row measured: what the family is, or its passes, and its
// GEMMs' part of it.
std::string family_note(const Measured& m, int f, const std::string& clock) {
  const double ms = m.family_ms(f);
  const Acc& first = m.steps.front()[f];
  auto pass_ms = [&](Pass p) {
    return format_ms(m.per_step([&](const Accs& x, std::size_t) { return x[f].ms[p]; }));
  };
  std::string note = "ours = " + clock + " per step in the " + std::string(kFamilyNames[f]) + " family (";
  if (f == kLoss) note += "softmax cross-entropy over every position, loss and its gradient";
  else if (f == kOptimizer) note += "NaN/Inf count of the gradients, clipping, AdamW";
  else if (f == kResAdds)
    note += "the res blocks' y = f(x) + x, in the last part's GEMM epilogue where it adds it, "
            "and dx = df + dy, in the first part's backward pass (ln's), else one pass each: " +
            std::to_string(first.folded) + " of the step's sums folded into those calls";
  else if (first.folded && ms <= 0.0)
    note += "folded into the dense family's GEMMs, " + std::to_string(first.folded) +
            " calls a step in cuBLASLt's epilogues: no kernel of its own";
  else
    note += "forward " + pass_ms(kForward) + ", backward " + pass_ms(kBackward);
  note += ")";
  if (first.gemm_calls || first.batched_calls) {
    const double g = m.per_step([&](const Accs& x, std::size_t) { return x[f].gemm_ms; });
    const double b = m.per_step([&](const Accs& x, std::size_t) { return x[f].batched_ms; });
    note += ", of which GEMMs " + format_ms(g) + " (" + std::to_string(first.gemm_calls) + " calls)";
    if (first.batched_calls)
      note += " and batched GEMMs " + format_ms(b) + " (" + std::to_string(first.batched_calls) +
              " calls)";
    note += ", the rest " + format_ms(ms - g - b);
  }
  return note;
}

double all_gemms_ms(const Accs& x) {
  double t = 0.0;
  for (const Acc& f : x) t += f.gemm_ms + f.batched_ms;
  return t;
}

}  // namespace

std::vector<Row> layer_rows(Backend& real, InstrumentedBackend& inst, const GptArgs& a,
                            Replay& replay, Gpt* recorded) {
  DrivenGpt driven(inst, a);
  std::unique_ptr<Gpt> own;
  if (!recorded) own = std::make_unique<Gpt>(real, a, 5);
  Gpt& gpt = recorded ? *recorded : *own;
  DPT_REQUIRE(driven.model().num_params() == gpt.model.num_params(), ExitCode::kOther,
              "layers: the opened-up model has another parameter count");
  Measured m;
  std::vector<double> replay_ms;  // the step's GEMMs replayed bare, just before each driven step
  const Side ours{[&] { replay_ms.push_back(device_ms(real, [&] { replay.queue_all(); })); },
                  [&] {
                    Accs acc{};
                    const double ms = driven.step(acc);
                    m.steps.push_back(acc);
                    return ms;
                  }};
  const Side base{nullptr, [&] { return device_ms(gpt.be, [&] { gpt.queue_step(); }); }};
  const Samples s = alternate(MPI_COMM_SELF, a.repeats, {a.warmup, 6.0, 10, 200}, ours, base);
  m.steps.erase(m.steps.begin(), m.steps.end() - s.repeats);
  m.step_ms = s.ours;
  replay_ms.erase(replay_ms.begin(), replay_ms.end() - s.repeats);
  const double step_ms = median(s.ours);
  const bool gpu = real.caps().device_clock;
  const std::string where = a.where() + (gpu ? ", batch " + std::to_string(a.batch) : "");
  // What "ms" is: host time per call, or device time between markers.
  const std::string clock = gpu ? "device ms (markers around each call)" : "ms";
  const std::string medians = "; medians of " + plural(s.repeats, "step") + " after warm-up";
  print_families_json(m, step_ms, median(s.base), s.repeats);

  std::vector<Row> rows;
  for (int f = 0; f < kFamilies; ++f)
    if (m.shows(f))
      rows.push_back({"GPT step by layer family: " + std::string(kFamilyNames[f]) + " (" + where + ")",
                      "",
                      family_note(m, f, clock) + "; baseline = the whole step driven through the "
                          "Layer API (" + where + "); ratio = share of the step" + medians,
                      "", m.family_ms(f), step_ms, m.share(f)});
  const double gemms = m.per_step([](const Accs& x, std::size_t) { return all_gemms_ms(x); });
  rows.push_back({"GPT step by layer family: all GEMMs (" + where + ")", "",
                  "ours = " + clock + " per step inside Backend::gemm and gemm_batched, timed "
                  "where the layers call them; baseline = the whole step driven through the Layer API; "
                  "ratio = share of the step" + medians,
                  "", gemms, step_ms, gemms / step_ms});
  rows.push_back({"GPT GEMMs inside the step vs replayed bare (" + where + ")", "",
                  "ours = the step's GEMM time where the layers call them (above); baseline = "
                  "the same calls replayed back to back on operands of their own (as the gemm "
                  "row), just before each step; ratio = ours / baseline" + medians,
                  "", gemms, median(replay_ms),
                  m.per_step([&](const Accs& x, std::size_t r) { return all_gemms_ms(x) / replay_ms[r]; })});
  rows.push_back(make_row("GPT step driven layer by layer vs train_step (" + where + ")", s,
                          ours_over_base, "",
                          "ours = the step above (res blocks opened up, every call timed" +
                              std::string(gpu ? ", its time the sum of its calls'" : "") + "); "
                          "baseline = train_step of the same model; ratio = ours / baseline: how "
                          "well the per-family figures add up to the real step"));
  return rows;
}

}  // namespace dptrain::bench
