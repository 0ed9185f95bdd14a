// Implements: dptrain_gpt_bench, the GPT micro-benchmark rows of
// tools/bench/bench.py (tools/bench/gpt_rows.py); one rank, rank 0 prints
// one JSON line per row:
//   gemm    the GPT's training step (train_step: forward, xent over every
//           position, backward, AdamW with clipping) against every GEMM and
//           batched GEMM that step makes, recorded from one step (same
//           shapes, transposes, leading dimensions, strides, alpha and beta)
//           and replayed back to back through the same Backend on operands
//           of their own
//   layers  where the step's time goes per layer family: the same model
//           with its res blocks opened up into their layers, driven
//           through the Layer API as Model and the res block drive them
//           (every layer's forward, backward_params and backward_input
//           timed, the blocks' copies and sums as "res adds", the loss, the
//           optimizer), the GEMM time inside each family measured where the
//           calls run; and that driven step against train_step
// plus one JSON line {"gpt_gemm_calls": [...]} with the bare time of each
// distinct GEMM of the step (for the analysis in docs/performance.md).
// Usage: dptrain_gpt_bench <gemm|layers|all> --model SPEC [--tokens T]
//            [--vocab V] [--batch B] [--threads T] [--repeats N] [--warmup N]
//            [--lr LR] [--beta2 B2] [--weight-decay W] [--clip-grad-norm C]
//            [--weight-decay-params all|matrices]
#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_gemm.hpp"
#include "backends/cpu/kernel_tables.hpp"
#include "bench_rows.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "train/train_step.hpp"

namespace dptrain::bench {
namespace {

constexpr const char* kUsage =
    "usage: dptrain_gpt_bench <gemm|layers|all> --model SPEC [--tokens T] [--vocab V]\n"
    "                         [--batch B] [--threads T] [--repeats N] [--warmup N]\n"
    "                         [--lr LR] [--beta2 B2] [--weight-decay W]\n"
    "                         [--clip-grad-norm C] [--weight-decay-params all|matrices]\n"
    "  --model SPEC  a sequence model starting with embed:D (res blocks of plain layers)\n"
    "  --tokens T    positions per sample (default 64)\n"
    "  --vocab V     vocabulary (default 256, bytes)\n"
    "  --batch B     rows per step (default 32)\n"
    "  --threads T   compute threads (default 1)\n"
    "  --repeats N   timed repeats per row (default: as many as fit a few seconds)\n"
    "  --warmup N    untimed pairs first (default 3)\n"
    "  optimizer:    AdamW, defaults those of jobs/text_gpt.ini (lr 0.003, beta2 0.95,\n"
    "                weight decay 0.1 on matrices, clip-grad-norm 1)\n";

struct GptArgs {
  std::string what, model;
  int tokens = 64, vocab = 256, batch = 32, threads = 1, repeats = 0, warmup = 3;
  float lr = 3e-3f, beta2 = 0.95f, weight_decay = 0.1f, clip = 1.0f;
  bool decay_all = false;
};

int positive(const std::string& opt, const std::string& v) {
  int n = 0;
  try {
    n = std::stoi(v);
  } catch (const std::exception&) {
  }
  DPT_REQUIRE(n > 0, ExitCode::kUsage, opt + " needs a positive integer, not '" + v + "'");
  return n;
}

float number(const std::string& opt, const std::string& v) {
  try {
    return std::stof(v);
  } catch (const std::exception&) {
    throw Error(ExitCode::kUsage, opt + " needs a number, not '" + v + "'");
  }
}

GptArgs parse_args(int argc, char** argv) {
  GptArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      DPT_REQUIRE(i + 1 < argc, ExitCode::kUsage, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--model") a.model = value();
    else if (arg == "--tokens") a.tokens = positive(arg, value());
    else if (arg == "--vocab") a.vocab = positive(arg, value());
    else if (arg == "--batch") a.batch = positive(arg, value());
    else if (arg == "--threads") a.threads = positive(arg, value());
    else if (arg == "--repeats") a.repeats = positive(arg, value());
    else if (arg == "--warmup") a.warmup = positive(arg, value());
    else if (arg == "--lr") a.lr = number(arg, value());
    else if (arg == "--beta2") a.beta2 = number(arg, value());
    else if (arg == "--weight-decay") a.weight_decay = number(arg, value());
    else if (arg == "--clip-grad-norm") a.clip = number(arg, value());
    else if (arg == "--weight-decay-params") a.decay_all = parse_decay_all(value());
    else if (arg == "-h" || arg == "--help") a.what = "help";
    else if (a.what.empty() && arg[0] != '-') a.what = arg;
    else throw Error(ExitCode::kUsage, "unexpected argument '" + arg + "'\n" + kUsage);
  }
  if (a.what == "help") return a;
  DPT_REQUIRE(a.what == "gemm" || a.what == "layers" || a.what == "all", ExitCode::kUsage,
              "which benchmark: gemm, layers or all\n" + std::string(kUsage));
  DPT_REQUIRE(!a.model.empty(), ExitCode::kUsage, "--model SPEC is needed");
  return a;
}

// --- a backend that records and times the GEMMs it forwards -------------------

struct GemmCall {
  bool batched, ta, tb;
  int m, n, k;
  float alpha, beta;
  int lda, ldb, ldc;
  std::size_t sa, sb, sc;
  int batch;

  auto key() const {
    return std::make_tuple(batched, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, sa, sb, sc, batch);
  }
  double flops() const { return 2.0 * m * n * k * batch; }
  // "2048x384x128 N/T" or "64x64x32 N/T x128 (batched)"
  std::string shape() const {
    std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                    (ta ? "T" : "N") + "/" + (tb ? "T" : "N");
    if (batched) s += " x" + std::to_string(batch) + " (batched)";
    return s;
  }
};

// Forwards everything to `inner` (so GEMMs run on its library and its
// cached batched primitives); kernel tables of its own, made by the CPU
// backend's factories. While `record`, every GEMM call is appended to
// `calls`; each call's time adds to gemm_ms / batched_ms.
class InstrumentedBackend final : public Backend {
 public:
  explicit InstrumentedBackend(Backend& inner)
      : inner_(inner),
        tables_{make_cpu_activation_kernels(), make_cpu_dense_kernels(),
                make_cpu_loss_kernels(),       make_cpu_optimizer_kernels(),
                make_cpu_spatial_kernels(),    make_cpu_norm_kernels(),
                make_cpu_dropout_kernels(),    make_cpu_augment_kernels(),
                make_cpu_sequence_kernels()} {}

  bool record = false;
  std::vector<GemmCall> calls;
  double gemm_ms = 0.0, batched_ms = 0.0;
  long gemm_calls = 0, batched_calls = 0;

  std::string name() const override { return inner_.name(); }
  std::string placement() const override { return inner_.placement(); }
  std::string gemm_library() const override { return inner_.gemm_library(); }
  BackendCaps caps() const override { return inner_.caps(); }
  std::unique_ptr<Communicator> make_communicator(MPI_Comm world) override {
    return inner_.make_communicator(world);
  }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) noexcept override { inner_.deallocate(p); }
  void* allocate_host(std::size_t bytes) override { return inner_.allocate_host(bytes); }
  void deallocate_host(void* p) noexcept override { inner_.deallocate_host(p); }
  void upload_async(int slot, void* dst, const void* src, std::size_t bytes) override {
    inner_.upload_async(slot, dst, src, bytes);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_to_host(dst, src, bytes);
  }
  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_device(dst, src, bytes);
  }
  void fill(float* x, float value, std::size_t n) override { inner_.fill(x, value, n); }
  void synchronize() override { inner_.synchronize(); }
  void add(const float* x, float* y, std::size_t n) override { inner_.add(x, y, n); }
  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    return inner_.count_nonfinite(x, n);
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (record) calls.push_back({false, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 0, 0, 0, 1});
    const auto t0 = Clock::now();
    inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    gemm_ms += ms_since(t0);
    ++gemm_calls;
  }
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                    std::size_t sa, const float* b, int ldb, std::size_t sb, float beta, float* c,
                    int ldc, std::size_t sc, int batch) override {
    if (record) calls.push_back({true, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, sa, sb, sc, batch});
    const auto t0 = Clock::now();
    inner_.gemm_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
    batched_ms += ms_since(t0);
    ++batched_calls;
  }

 protected:
  KernelTables& kernels() override { return tables_; }

 private:
  Backend& inner_;
  KernelTables tables_;
};

// --- the GPT, its data and its optimizer ----------------------------------------

// Random token ids [B, T] (int32 bit patterns in the float input, as the
// trainer hands them over) and next-token labels [B, T].
struct TokenShard {
  TokenShard(Backend& be, const GptArgs& a, std::uint32_t seed)
      : x(be, std::size_t(a.batch) * a.tokens), y(be, std::size_t(a.batch) * a.tokens) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> ids(std::size_t(a.batch) * a.tokens), labels(ids.size());
    for (auto& v : ids) v = static_cast<std::int32_t>(rng() % a.vocab);
    for (auto& v : labels) v = static_cast<std::int32_t>(rng() % a.vocab);
    be.copy_to_device(x.get(), ids.data(), ids.size() * sizeof(std::int32_t));
    be.copy_to_device(y.get(), labels.data(), labels.size() * sizeof(std::int32_t));
    shard.rows = a.batch;
    shard.features = x.get();
    shard.labels = y.get();
  }
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  Shard shard;
};

OptimizerConfig adamw(const GptArgs& a, const Model& m) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdamW;
  c.beta2 = a.beta2;
  c.weight_decay = a.weight_decay;
  c.clip_grad_norm = a.clip;
  c.decay_all = a.decay_all;
  if (!c.decay_all) c.decay_ranges = matrices_decay_ranges(m.param_layout());
  return c;
}

// A model with what train_step needs, as the trainer has it on one rank.
struct Gpt {
  Gpt(Backend& be, const GptArgs& a, std::uint32_t seed)
      : be(be), args(a), model(be, parse_model_spec(a.model), Shape{a.tokens}, a.batch, a.vocab),
        opt(be, (model.init(1), adamw(a, model)), model.num_params()), data(be, a, seed),
        stats(be, 2), comm(make_mpi_communicator(MPI_COMM_SELF)) {}
  void step() {
    train_step(be, *comm, model, opt, LossKind::kXent, data.shard, std::uint64_t(args.batch),
               args.lr, stats.get(), nullptr);
    be.synchronize();
  }
  Backend& be;
  const GptArgs& args;
  Model model;
  Optimizer opt;
  TokenShard data;
  DeviceBuffer<float> stats;
  std::unique_ptr<Communicator> comm;
};

std::string format_g(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

std::string on_what(const GptArgs& a, const Model& m) {
  return std::to_string(m.num_params()) + " params, batch " + std::to_string(a.batch) + " x " +
         std::to_string(a.tokens) + " tokens, vocab " + std::to_string(a.vocab) + ", 1 rank, " +
         plural(a.threads, "thread");
}

// --- gemm: the step against its GEMMs, replayed ----------------------------------

// Each recorded call on operands of its own (random values), as many floats
// as its leading dimensions and strides reach.
class Replay {
 public:
  Replay(Backend& be, const std::vector<GemmCall>& calls) : be_(be), calls_(calls) {
    std::mt19937 rng(3);
    for (const GemmCall& g : calls_) {
      const int a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
      const int b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
      ops_.push_back({buffer(extent(a_rows, a_cols, g.lda, g.sa, g.batch), rng),
                      buffer(extent(b_rows, b_cols, g.ldb, g.sb, g.batch), rng),
                      buffer(extent(g.m, g.n, g.ldc, g.sc, g.batch), rng)});
    }
  }
  void run(std::size_t i) {
    const GemmCall& g = calls_[i];
    const Operands& o = ops_[i];
    if (g.batched)
      be_.gemm_batched(g.ta, g.tb, g.m, g.n, g.k, g.alpha, o.a, g.lda, g.sa, o.b, g.ldb, g.sb,
                       g.beta, o.c, g.ldc, g.sc, g.batch);
    else
      be_.gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, o.a, g.lda, o.b, g.ldb, g.beta, o.c, g.ldc);
  }
  void run_all() {
    for (std::size_t i = 0; i < calls_.size(); ++i) run(i);
    be_.synchronize();
  }

 private:
  struct Operands {
    const float *a, *b;
    float* c;
  };
  static std::size_t extent(int rows, int cols, int ld, std::size_t stride, int batch) {
    return std::size_t(batch - 1) * stride + std::size_t(rows - 1) * ld + std::size_t(cols);
  }
  float* buffer(std::size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> host(n);
    for (float& v : host) v = u(rng);
    buffers_.emplace_back(be_, n);
    be_.copy_to_device(buffers_.back().get(), host.data(), n * sizeof(float));
    return buffers_.back().get();
  }

  Backend& be_;
  std::vector<GemmCall> calls_;
  std::vector<DeviceBuffer<float>> buffers_;
  std::vector<Operands> ops_;
};

// The GEMMs one train_step of the GPT makes, in order (one recorded step).
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

struct GemmResult {
  Row row;
  double replay_ms = 0.0;  // median
  std::vector<GemmCall> calls;
};

GemmResult gemm_row(Backend& real, InstrumentedBackend& inst, const GptArgs& a) {
  GemmResult res;
  res.calls = record_step(inst, a);
  Gpt gpt(real, a, 5);
  Replay replay(real, res.calls);
  long batched = 0;
  double flops = 0.0;
  for (const GemmCall& g : res.calls) {
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
  res.replay_ms = median(s.base);
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.3g GFLOP, %.1f GFLOP/s in the step, %.1f bare", flops * 1e-9,
                flops / median(s.ours) * 1e-6, flops / res.replay_ms * 1e-6);
  res.row = make_row("GPT step vs bare GEMMs (1 rank, 1 thread)", s, ours_over_base, "<= 1.3",
                     "ours = train_step (forward, xent over every position, backward, AdamW with "
                     "clip-grad-norm " + format_g(a.clip) + ") of " + a.model +
                         ", " + on_what(a, gpt.model) + "; baseline = the " +
                         plural(static_cast<long>(res.calls.size()), "GEMM") + " of one step (" +
                         std::to_string(batched) + " of them batched over the heads), recorded "
                         "and replayed back to back through the same Backend (" +
                         real.gemm_library() + "), same shapes, strides, alpha and beta, "
                         "operands of their own; " + rate + "; ratio = ours / baseline");
  print_calls(replay, res.calls);
  return res;
}

// --- layers: where the step's time goes, per layer family --------------------------

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
    model_ = std::make_unique<Model>(be, std::move(layers), input, a.batch, a.vocab);
    model_->init(1);
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
    for (DeviceBuffer<float>* b : {&ga_, &gb_, &gc_, &gd_, &ge_})
      *b = DeviceBuffer<float>(be, rows * widest);
  }

  const Model& model() const { return *model_; }

  // One training step, as train_step runs it on one rank; adds each
  // family's time to acc and returns the step's.
  double step(Accs& acc) {
    const auto t_step = Clock::now();
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
        const TensorView y = output(l);
        timed(acc, n.family[j], kForward, [&] { l->forward(be_, cur, y, Mode::kTrain); });
        cur = y;
      }
      if (n.block) {  // y = f(x) + x
        const TensorView y{n.out.get(), rows, in.shape};
        timed(acc, kResAdds, kForward, [&] {
          be_.copy_device(y.data, cur.data, y.count() * sizeof(float));
          be_.add(in.data, y.data, y.count());
        });
        cur = y;
      }
      in = cur;
    }
    const int terms = loss_terms_per_sample(LossKind::kXent, model_->output_shape());
    const float scale = 1.0f / static_cast<float>(std::uint64_t(rows) * std::uint64_t(terms));
    timed(acc, kLoss, kForward, [&] {
      apply_loss(be_, LossKind::kXent, in.data, shard, model_->output_shape(), scale,
                 model_->output_grad(), stats_.get());
    });

    ConstTensorView dy{model_->output_grad(), rows, model_->output_shape()};
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
      // The block's backward_params: its parts last first, both passes of
      // each, then dx = df + dy; and its backward_input, a copy of that dx.
      ConstTensorView g = dy;
      for (std::size_t j = n.body.size(); j-- > 0;) {
        Layer* l = n.body[j];
        const ConstTensorView lin = j == 0 ? x : ConstTensorView(output(n.body[j - 1]));
        if (!l->params().empty())
          timed(acc, n.family[j], kBackward, [&] { l->backward_params(be_, lin, g); });
        const TensorView dx{g.data == gc_.get() ? gd_.get() : gc_.get(), rows, l->input_shape()};
        timed(acc, n.family[j], kBackward, [&] { l->backward_input(be_, lin, output(l), g, dx); });
        g = dx;
      }
      const bool last = i == first_trained_;
      const TensorView dx{dy.data == ga_.get() ? gb_.get() : ga_.get(), rows, x.shape};
      timed(acc, kResAdds, kBackward, [&] {
        be_.copy_device(ge_.get(), g.data, x.count() * sizeof(float));
        be_.add(dy.data, ge_.get(), x.count());
        if (!last) be_.copy_device(dx.data, ge_.get(), x.count() * sizeof(float));
      });
      if (last) break;
      dy = dx;
    }
    timed(acc, kOptimizer, kUpdate, [&] {
      if (be_.count_nonfinite(model_->grads(), model_->num_params()) == 0)
        opt_->step(model_->params(), model_->grads(), a_.lr);
    });
    be_.synchronize();
    return ms_since(t_step);
  }

 private:
  struct Node {
    std::vector<Layer*> body;      // one plain layer, or a block's parts
    std::vector<Family> family;    // of each
    bool block = false;
    DeviceBuffer<float> out;       // a block's output
  };

  TensorView output(Layer* l) {
    return {outputs_.at(l).get(), a_.batch, l->output_shape()};
  }

  template <typename F>
  void timed(Accs& acc, Family f, Pass p, F&& fn) {
    const double g0 = be_.gemm_ms, b0 = be_.batched_ms;
    const long gc0 = be_.gemm_calls, bc0 = be_.batched_calls;
    const auto t0 = Clock::now();
    fn();
    Acc& x = acc[f];
    x.ms[p] += ms_since(t0);
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
  std::map<Layer*, DeviceBuffer<float>> outputs_;
  DeviceBuffer<float> ga_, gb_, gc_, gd_, ge_;  // Model's and the block's gradient buffers
};

std::string format_ms(double ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g ms", ms);
  return s;
}

std::vector<Row> layer_rows(Backend& real, InstrumentedBackend& inst, const GptArgs& a,
                            double replay_ms) {
  DrivenGpt driven(inst, a);
  Gpt gpt(real, a, 5);
  DPT_REQUIRE(driven.model().num_params() == gpt.model.num_params(), ExitCode::kOther,
              "layers: the opened-up model has another parameter count");
  std::vector<Accs> steps;
  const Side ours{nullptr, [&] {
                    Accs acc{};
                    const double ms = driven.step(acc);
                    steps.push_back(acc);
                    return ms;
                  }};
  const Side base{nullptr, [&] {
                    const auto t0 = Clock::now();
                    gpt.step();
                    return ms_since(t0);
                  }};
  const Samples s = alternate(MPI_COMM_SELF, a.repeats, {a.warmup, 6.0, 10, 200}, ours, base);
  steps.erase(steps.begin(), steps.end() - s.repeats);
  const double step_ms = median(s.ours);
  const std::string where = "1 rank, " + plural(a.threads, "thread");
  const std::string medians = "; medians of " + plural(s.repeats, "step") + " after warm-up";

  std::vector<Row> rows;
  auto per_step = [&](auto f) {
    std::vector<double> v;
    for (std::size_t r = 0; r < steps.size(); ++r) v.push_back(f(steps[r], r));
    return median(v);
  };
  for (int f = 0; f < kFamilies; ++f) {
    const double ms = per_step([&](const Accs& x, std::size_t) { return x[f].total(); });
    if (ms <= 0.0) continue;
    const double share = per_step([&](const Accs& x, std::size_t r) { return x[f].total() / s.ours[r]; });
    const Acc& first = steps.front()[f];
    std::string note = "ours = ms per step in the " + std::string(kFamilyNames[f]) + " family (";
    if (f == kLoss) note += "softmax cross-entropy over every position, loss and its gradient";
    else if (f == kOptimizer) note += "NaN/Inf count of the gradients, clipping, AdamW";
    else if (f == kResAdds) note += "the res blocks' y = f(x) + x and dx = df + dy, copies and sums";
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
  const double gemms = per_step([](const Accs& x, std::size_t) {
    double t = 0.0;
    for (const Acc& f : x) t += f.gemm_ms + f.batched_ms;
    return t;
  });
  rows.push_back({"GPT step by layer family: all GEMMs (" + where + ")", "",
                  "ours = ms per step inside Backend::gemm and gemm_batched, timed where the "
                  "layers call them; baseline = the whole step driven through the Layer API; "
                  "ratio = share of the step" + medians,
                  "", gemms, step_ms, gemms / step_ms});
  if (replay_ms > 0.0)
    rows.push_back({"GPT GEMMs inside the step vs replayed bare (" + where + ")", "",
                    "ours = the step's GEMM time where the layers call them (above); baseline = "
                    "the same calls replayed back to back on operands of their own (the gemm "
                    "row); ratio = ours / baseline",
                    "", gemms, replay_ms, gemms / replay_ms});
  rows.push_back(make_row("GPT step driven layer by layer vs train_step (" + where + ")", s,
                          ours_over_base, "",
                          "ours = the step above (res blocks opened up, every call timed); "
                          "baseline = train_step of the same model; ratio = ours / baseline: how "
                          "well the per-family figures add up to the real step"));
  return rows;
}

int run(const MpiSession& mpi, const GptArgs& a) {
  if (mpi.rank() == 0) {
    auto real = make_backend("cpu", BackendOptions{a.threads});
    InstrumentedBackend inst(*real);
    double replay_ms = -1.0;
    if (a.what == "gemm" || a.what == "all") {
      GemmResult g = gemm_row(*real, inst, a);
      print_row(g.row);
      replay_ms = g.replay_ms;
    }
    if (a.what == "layers" || a.what == "all")
      for (const Row& r : layer_rows(*real, inst, a, replay_ms)) print_row(r);
  }
  idle_barrier(mpi.world());
  return 0;
}

}  // namespace
}  // namespace dptrain::bench

int main(int argc, char** argv) {
  using namespace dptrain;
  cpu_gemm::prepare(argv);
  MpiSession mpi(argc, argv);
  bench::GptArgs args;
  try {
    args = bench::parse_args(argc, argv);  // every rank reaches the same verdict
  } catch (const Error& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "dptrain_gpt_bench: error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  if (args.what == "help") {
    if (mpi.rank() == 0) std::fputs(bench::kUsage, stdout);
    return 0;
  }
  try {
    return bench::run(mpi, args);
  } catch (const std::exception& e) {
    const Error* err = dynamic_cast<const Error*>(&e);
    report_error(err ? err->message() : e.what(), mpi.rank(), mpi.size());
    const int code = static_cast<int>(err ? err->code() : ExitCode::kOther);
    std::fflush(stderr);
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  }
}
