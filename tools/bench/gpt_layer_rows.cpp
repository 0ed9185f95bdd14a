// Implements: the layers row of dptrain_gpt_bench (see gpt_bench.hpp): the
// GPT's step driven layer by layer, timed per layer family: on the host
// clock on the CPU, by device markers around each call (and each GEMM in
// it) where the backend has a device clock (a GPU).
#include "dptrain/backends/backend_buffer.hpp"
#include "gpt_bench.hpp"

namespace dptrain::bench {
namespace {


enum Family { kEmbed, kPos, kLn, kAttn, kDense, kGelu, kResAdds, kLoss, kOptimizer, kOther, kFamilies };
constexpr const char* kFamilyNames[] = {"embed", "pos",  "ln",        "attn",        "dense",
                                        "gelu",  "res adds", "loss", "optimizer", "other layers"};
enum Pass { kForward, kBackward, kUpdate, kPasses };

Family family_of(const Layer& l) {
  const std::string spec = l.spec();
  const std::string kind = spec.substr(0, spec.find_first_of(":("));
  static const std::map<std::string, Family> kinds{{"embed", kEmbed}, {"pos", kPos},
                                                   {"ln", kLn},       {"attn", kAttn},
                                                   {"dense", kDense}, {"gelu", kGelu}};
  const auto it = kinds.find(kind);
  return it == kinds.end() ? kOther : it->second;
}

struct Acc {
  std::array<double, kPasses> ms{};
  double gemm_ms = 0.0, batched_ms = 0.0;
  long gemm_calls = 0, batched_calls = 0;
  long folded = 0;  // calls folded into the previous layer's GEMM (no kernel of their own)
  double total() const { return ms[kForward] + ms[kBackward] + ms[kUpdate]; }
};
using Accs = std::array<Acc, kFamilies>;

// The GPT with its res blocks opened up: the same layers (built from the
// spec with every block replaced by its parts, so names, arena layout and
// init are the model's), driven through the Layer API the way Model and
// the res block drive them, each call timed.
class DrivenGpt {
 public:
  DrivenGpt(InstrumentedBackend& be, const GptArgs& a) : be_(be), a_(a), data_(be, a, 5) {
    std::vector<LayerSpec> flat;
    std::vector<std::size_t> parts;  // per top-level layer: 0 plain, else the block's size
    for (const LayerSpec& s : parse_model_spec(a.model)) {
      if (s.kind == "res") {
        for (const LayerSpec& in : s.inner)
          DPT_REQUIRE(in.inner.empty(), ExitCode::kUsage, "layers: nested blocks are not supported");
        flat.insert(flat.end(), s.inner.begin(), s.inner.end());
        parts.push_back(s.inner.size());
      } else {
        flat.push_back(s);
        parts.push_back(0);
      }
    }
    const Shape input{a.tokens};
    std::vector<std::unique_ptr<Layer>> layers = build_layers(flat, input, a.vocab);
    std::vector<Layer*> raw;
    for (const auto& l : layers) raw.push_back(l.get());
    std::size_t widest = input.size();
    for (Layer* l : raw) widest = std::max({widest, l->input_shape().size(), l->output_shape().size()});
    model_ = std::make_unique<Model>(be, std::move(layers), input, a.batch, a.vocab,
                                     Recompute::kNone, ModelStorage::kAllocated,
                                     logits_precision(a.precision, LossKind::kXent));
    model_->init(1);
    model_->round_params();  // the layers run here without Model::forward
    opt_ = std::make_unique<Optimizer>(be, adamw(a, *model_), model_->num_params());
    const auto rows = static_cast<std::size_t>(a.batch);
    std::size_t next = 0;
    for (std::size_t p : parts) {
      Node n;
      n.block = p > 0;
      for (std::size_t j = 0; j < std::max<std::size_t>(p, 1); ++j) n.body.push_back(raw[next++]);
      for (Layer* l : n.body) {
        outputs_.emplace(l, DeviceBuffer<float>(be, rows * l->output_shape().size()));
        n.family.push_back(family_of(*l));
      }
      if (n.block) n.out = DeviceBuffer<float>(be, rows * n.body.back()->output_shape().size());
      nodes_.push_back(std::move(n));
    }
    first_trained_ = nodes_.size();
    for (std::size_t i = 0; i < nodes_.size() && first_trained_ == nodes_.size(); ++i)
      for (Layer* l : nodes_[i].body)
        if (!l->params().empty()) first_trained_ = i;
    for (DeviceBuffer<float>* b : {&ga_, &gb_, &gc_, &gd_})
      *b = DeviceBuffer<float>(be, rows * widest);
    if (be.caps().rounds_gemm_operands)
      for (DeviceBuffer<std::uint16_t>* b : {&ga16_, &gb16_, &dgelu16_})
        *b = DeviceBuffer<std::uint16_t>(be, rows * widest);
    for (const Node& n : nodes_)
      for (std::size_t j = 0; j < n.body.size(); ++j)
        if (mlp_bf16(n, j))
          hidden16_.emplace(n.body[j],
                            DeviceBuffer<std::uint16_t>(be, rows * n.body[j]->output_shape().size()));
  }

  const Model& model() const { return *model_; }

  // One training step, as train_step runs it on one rank; adds each
  // family's time to acc and returns the step's: its host time, or on a
  // device clock the sum of its calls' device times (the host waits after
  // each call, and the device's idle time in between is no part of it).
  double step(Accs& acc) {
    const auto t_step = Clock::now();
    device_step_ms_ = 0.0;
    be_.device_gemms = be_.caps().device_clock;
    const int rows = a_.batch;
    const Shard& shard = data_.shard;
    std::vector<ConstTensorView> node_in(nodes_.size());
    ConstTensorView in{shard.features, rows, model_->input_shape()};
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = nodes_[i];
      node_in[i] = in;
      ConstTensorView cur = in;
      for (std::size_t j = 0; j < n.body.size(); ++j) {
        Layer* l = n.body[j];
        TensorView y = output(l);
        if (n.block && j + 1 < n.body.size() && l->folds_next(*n.body[j + 1])) {
          // The part and the activation after it in one GEMM, as the block
          // runs them (in bf16 where it is a bf16 MLP): the time is the
          // part's family's.
          TensorView next = output(n.body[j + 1]);
          if (mlp_bf16(n, j)) {
            y.bf16 = hidden16_.at(l).get();
            next.bf16 = n.body[j + 2]->input_bf16();
          }
          ++j;
          timed(acc, n.family[j - 1], kForward,
                [&] { l->forward_folding_next(be_, cur, y, next, Mode::kTrain); });
          ++acc[n.family[j]].folded;
          cur = next;
          continue;
        }
        // A layer norm writes the next part's input copy, as in the block.
        if (n.block && j + 1 < n.body.size() && l->writes_output_bf16())
          y.bf16 = n.body[j + 1]->input_bf16();
        if (n.block && j + 1 == n.body.size() && adds_in_last(*l)) {
          // y = f(x) + x by the last part's GEMM, as the block makes it
          const TensorView out{n.out.get(), rows, in.shape};
          timed(acc, n.family[j], kForward,
                [&] { l->forward_adding(be_, cur, in, out, Mode::kTrain); });
          ++acc[kResAdds].folded;
          cur = out;
          break;
        }
        timed(acc, n.family[j], kForward, [&] { l->forward(be_, cur, y, Mode::kTrain); });
        cur = y;
      }
      if (n.block && cur.data != n.out.get()) {  // y = f(x) + x, one pass as the block makes it
        const TensorView y{n.out.get(), rows, in.shape};
        timed(acc, kResAdds, kForward, [&] { be_.sum(cur.data, in.data, y.data, y.count()); });
        cur = y;
      }
      in = cur;
    }
    const int terms = loss_terms_per_sample(LossKind::kXent, model_->output_shape());
    const float scale = 1.0f / static_cast<float>(std::uint64_t(rows) * std::uint64_t(terms));
    timed(acc, kLoss, kForward, [&] {
      apply_loss(be_, LossKind::kXent, in.data, shard, model_->output_shape(), scale,
                 model_->output_grad(), stats_.get(), model_->output_grad_bf16(),
                 model_->output_bf16());
    });

    ConstTensorView dy{model_->output_grad(), rows, model_->output_shape(),
                       model_->output_grad_bf16()};
    for (std::size_t i = nodes_.size(); i-- > first_trained_;) {
      Node& n = nodes_[i];
      const ConstTensorView x = node_in[i];
      if (!n.block) {
        Layer* l = n.body[0];
        if (!l->params().empty()) {
          timed(acc, n.family[0], kBackward, [&] { l->backward_params(be_, x, dy); });
          if (i == first_trained_) break;
        }
        const TensorView dx{dy.data == ga_.get() ? gb_.get() : ga_.get(), rows, l->input_shape()};
        timed(acc, n.family[0], kBackward, [&] { l->backward_input(be_, x, output(l), dy, dx); });
        dy = dx;
        continue;
      }
      // The block's chain, as residual.cpp runs it: its parts last first,
      // both passes of each (a part that folds the activation before it
      // carries the gradient through both); the first part's input
      // gradient with dy added, dx = df + dy, in its own pass (ln's), with
      // the copy for the block before, as the model hands it on.
      const bool adds_in_first = !(n.body.size() > 1 && n.body[1]->folds_previous(*n.body[0]));
      const bool in_a = dy.data != ga_.get();
      const TensorView block_dx{in_a ? ga_.get() : gb_.get(), rows, x.shape,
                                in_a ? ga16_.get() : gb16_.get()};
      ConstTensorView g = dy;
      auto part_input = [&](std::size_t j) {
        return j == 0 ? x : ConstTensorView(output(n.body[j - 1]));
      };
      for (std::size_t j = n.body.size(); j-- > 0;) {
        Layer* l = n.body[j];
        const ConstTensorView lin = part_input(j);
        const Family f = n.family[j];
        if (!l->params().empty()) timed(acc, f, kBackward, [&] { l->backward_params(be_, lin, g); });
        if (j == 0 && adds_in_first) {
          if (i == first_trained_) break;
          timed(acc, f, kBackward,
                [&] { l->backward_input_adding(be_, lin, output(l), g, block_dx, dy); });
          ++acc[kResAdds].folded;
          g = block_dx;
          break;
        }
        float* free = g.data == gc_.get() ? gd_.get() : gc_.get();
        if (j >= 1 && l->folds_previous(*n.body[j - 1])) {
          TensorView dx{free, rows, n.body[--j]->input_shape()};
          ConstTensorView prev_x = part_input(j);
          if (j >= 1 && mlp_bf16(n, j - 1)) {  // the bf16 MLP's gradient, in bf16
            prev_x.bf16 = hidden16_.at(n.body[j - 1]).get();
            dx.bf16 = dgelu16_.get();
          }
          timed(acc, f, kBackward,
                [&] { l->backward_input_folding_previous(be_, lin, prev_x, g, dx); });
          ++acc[n.family[j]].folded;
          g = dx;
          continue;
        }
        const TensorView dx{free, rows, l->input_shape()};
        timed(acc, f, kBackward, [&] { l->backward_input(be_, lin, output(l), g, dx); });
        g = dx;
      }
      if (i == first_trained_) break;
      if (!adds_in_first)
        timed(acc, kResAdds, kBackward,
              [&] { be_.sum(g.data, dy.data, block_dx.data, x.count(), block_dx.bf16); });
      dy = block_dx;
    }
    timed(acc, kOptimizer, kUpdate, [&] {
      if (be_.count_nonfinite(model_->grads(), model_->num_params()) != 0) return;
      float* w = model_->params();  // and the bf16 twin in the same pass, as training does
      opt_->step(w, model_->grads(), a_.lr, nullptr, model_->params_bf16_for_update());
    });
    be_.synchronize();
    be_.device_gemms = false;
    return be_.caps().device_clock ? device_step_ms_ : ms_since(t_step);
  }

 private:
  struct Node {
    std::vector<Layer*> body;      // one plain layer, or a block's parts
    std::vector<Family> family;    // of each
    bool block = false;
    DeviceBuffer<float> out;       // a block's output
  };

  // Whether block part j starts a bf16 MLP, as residual.cpp decides it: it
  // folds the gelu:tanh after it, and the part after that folds it
  // backward and keeps its input's rounding, where the backend rounds.
  bool mlp_bf16(const Node& n, std::size_t j) const {
    return n.block && be_.caps().rounds_gemm_operands && j + 2 < n.body.size() &&
           n.body[j]->folds_next(*n.body[j + 1]) && n.body[j + 2]->folds_previous(*n.body[j + 1]) &&
           !n.body[j + 2]->backward_reads_input();
  }

  // Whether a block's last part (not folded into the part before it) adds
  // the shortcut as it writes the block's output, as residual.cpp decides it.
  static bool adds_in_last(const Layer& l) {
    return l.forward_adds() && !l.backward_reads_output();
  }

  TensorView output(Layer* l) {
    return {outputs_.at(l).get(), a_.batch, l->output_shape()};
  }

  template <typename F>
  void timed(Accs& acc, Family f, Pass p, F&& fn) {
    const double g0 = be_.gemm_ms, b0 = be_.batched_ms;
    const long gc0 = be_.gemm_calls, bc0 = be_.batched_calls;
    const double ms = device_ms(be_, fn);
    be_.settle();
    device_step_ms_ += ms;
    Acc& x = acc[f];
    x.ms[p] += ms;
    x.gemm_ms += be_.gemm_ms - g0;
    x.batched_ms += be_.batched_ms - b0;
    x.gemm_calls += be_.gemm_calls - gc0;
    x.batched_calls += be_.batched_calls - bc0;
  }

  InstrumentedBackend& be_;
  const GptArgs& a_;
  TokenShard data_;
  DeviceBuffer<float> stats_{be_, 2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<Node> nodes_;
  std::size_t first_trained_ = 0;
  double device_step_ms_ = 0.0;  // this step's calls, device-timed
  std::map<Layer*, DeviceBuffer<float>> outputs_;
  DeviceBuffer<float> ga_, gb_, gc_, gd_;  // Model's and the block's gradient buffers
  DeviceBuffer<std::uint16_t> ga16_, gb16_;  // the copies of ga_ and gb_, where rounded
  // The bf16 MLP's hidden values: each first dense's output, and a pass's
  // gradient of it (the model keeps them in the block's slots).
  std::map<Layer*, DeviceBuffer<std::uint16_t>> hidden16_;
  DeviceBuffer<std::uint16_t> dgelu16_;
};

std::string format_ms(double ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g ms", ms);
  return s;
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
  std::vector<Accs> steps;
  std::vector<double> replay_ms;  // the step's GEMMs replayed bare, just before each driven step
  const Side ours{[&] { replay_ms.push_back(device_ms(real, [&] { replay.queue_all(); })); },
                  [&] {
                    Accs acc{};
                    const double ms = driven.step(acc);
                    steps.push_back(acc);
                    return ms;
                  }};
  const Side base{nullptr, [&] { return device_ms(gpt.be, [&] { gpt.queue_step(); }); }};
  const Samples s = alternate(MPI_COMM_SELF, a.repeats, {a.warmup, 6.0, 10, 200}, ours, base);
  steps.erase(steps.begin(), steps.end() - s.repeats);
  replay_ms.erase(replay_ms.begin(), replay_ms.end() - s.repeats);
  const double step_ms = median(s.ours);
  const bool gpu = real.caps().device_clock;
  const std::string where = a.where() + (gpu ? ", batch " + std::to_string(a.batch) : "");
  // What "ms" is: host time per call, or device time between markers.
  const std::string clock = gpu ? "device ms (markers around each call)" : "ms";
  const std::string medians = "; medians of " + plural(s.repeats, "step") + " after warm-up";

  std::vector<Row> rows;
  auto per_step = [&](auto f) {
    std::vector<double> v;
    for (std::size_t r = 0; r < steps.size(); ++r) v.push_back(f(steps[r], r));
    return median(v);
  };
  // The same figures as one JSON line for the results' breakdown table:
  // {"gpt_families": [{family, ms, share, forward_ms, backward_ms, update_ms,
  //  gemm_ms, gemm_calls, batched_ms, batched_calls, folded_calls}], "step_ms",
  //  "train_step_ms"}; folded_calls: calls made inside another family's GEMMs.
  nlohmann::json families = nlohmann::json::array();
  for (int f = 0; f < kFamilies; ++f) {
    auto med = [&](auto g) { return per_step([&](const Accs& x, std::size_t) { return g(x[f]); }); };
    const double ms = med([](const Acc& x) { return x.total(); });
    if (ms <= 0.0 && !steps.front()[f].folded) continue;
    families.push_back(
        {{"family", kFamilyNames[f]}, {"ms", ms},
         {"share", per_step([&](const Accs& x, std::size_t r) { return x[f].total() / s.ours[r]; })},
         {"forward_ms", med([](const Acc& x) { return x.ms[kForward]; })},
         {"backward_ms", med([](const Acc& x) { return x.ms[kBackward]; })},
         {"update_ms", med([](const Acc& x) { return x.ms[kUpdate]; })},
         {"gemm_ms", med([](const Acc& x) { return x.gemm_ms; })},
         {"gemm_calls", steps.front()[f].gemm_calls},
         {"batched_ms", med([](const Acc& x) { return x.batched_ms; })},
         {"batched_calls", steps.front()[f].batched_calls},
         {"folded_calls", steps.front()[f].folded}});
  }
  std::printf("%s\n", nlohmann::json({{"gpt_families", families},
                                      {"step_ms", step_ms},
                                      {"train_step_ms", median(s.base)},
                                      {"repeats", s.repeats}})
                          .dump()
                          .c_str());
  std::fflush(stdout);
  for (int f = 0; f < kFamilies; ++f) {
    const double ms = per_step([&](const Accs& x, std::size_t) { return x[f].total(); });
    const Acc& first = steps.front()[f];
    if (ms <= 0.0 && !first.folded) continue;
    const double share = per_step([&](const Accs& x, std::size_t r) { return x[f].total() / s.ours[r]; });
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
      note += "forward " + format_ms(per_step([&](const Accs& x, std::size_t) { return x[f].ms[kForward]; })) +
              ", backward " + format_ms(per_step([&](const Accs& x, std::size_t) { return x[f].ms[kBackward]; }));
    note += ")";
    if (first.gemm_calls || first.batched_calls) {
      const double g = per_step([&](const Accs& x, std::size_t) { return x[f].gemm_ms; });
      const double b = per_step([&](const Accs& x, std::size_t) { return x[f].batched_ms; });
      note += ", of which GEMMs " + format_ms(g) + " (" + std::to_string(first.gemm_calls) + " calls)";
      if (first.batched_calls)
        note += " and batched GEMMs " + format_ms(b) + " (" + std::to_string(first.batched_calls) +
                " calls)";
      note += ", the rest " + format_ms(ms - g - b);
    }
    note += "; baseline = the whole step driven through the Layer API (" + where +
            "); ratio = share of the step" + medians;
    rows.push_back({"GPT step by layer family: " + std::string(kFamilyNames[f]) + " (" + where + ")",
                    "", note, "", ms, step_ms, share});
  }
  auto gemm_ms = [](const Accs& x) {
    double t = 0.0;
    for (const Acc& f : x) t += f.gemm_ms + f.batched_ms;
    return t;
  };
  const double gemms = per_step([&](const Accs& x, std::size_t) { return gemm_ms(x); });
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
                  per_step([&](const Accs& x, std::size_t r) { return gemm_ms(x) / replay_ms[r]; })});
  rows.push_back(make_row("GPT step driven layer by layer vs train_step (" + where + ")", s,
                          ours_over_base, "",
                          "ours = the step above (res blocks opened up, every call timed" +
                              std::string(gpu ? ", its time the sum of its calls'" : "") + "); "
                          "baseline = train_step of the same model; ratio = ours / baseline: how "
                          "well the per-family figures add up to the real step"));
  return rows;
}

}  // namespace dptrain::bench
