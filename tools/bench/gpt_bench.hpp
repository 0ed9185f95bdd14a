// Implements: what the parts of dptrain_gpt_bench share (internal to
// tools/bench): its arguments, device timing, the GPT with its random token
// shard and optimizer, the replay of recorded GEMMs (the backend that
// records them is instrumented_backend.hpp's), and the row makers
// (gpt_gemm_rows.cpp, gpt_layer_rows.cpp with driven_gpt.cpp,
// gpt_throughput_row.cpp, gpt_attention_row.cpp); gpt_bench.cpp is the
// command.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_gemm.hpp"
#include "bench_rows.hpp"
#include "instrumented_backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/parallel/sync_strategy.hpp"
#include "dptrain/run/options.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "train/train_step.hpp"

namespace dptrain::bench {

// One attention row's shape: batch N, H heads, T positions, head dim hd.
struct AttentionShape {
  int batch = 0, heads = 0, tokens = 0, head_dim = 0;
};

struct GptArgs {
  std::vector<std::string> what;  // gemm, layers, throughput, attention (all: gemm and layers)
  std::string model, device = "cpu", precision = "fp32", attention = "auto", recompute = "none";
  std::vector<AttentionShape> attention_shapes;  // of the attention rows
  int tokens = 64, vocab = 256, batch = 32, threads = 1, repeats = 0, warmup = 3;
  float lr = 3e-3f, beta2 = 0.95f, weight_decay = 0.1f, clip = 1.0f;
  double peak_tflops = 0.0;  // the device's dense peak for MFU; 0: unknown
  bool decay_all = false;
  bool shard_params = false;  // --shard-params: the step of dptrain train --shard-params
  bool wants(const char* row) const { return std::find(what.begin(), what.end(), row) != what.end(); }
  bool gpu() const { return device == "cuda"; }
  // "1 rank, 1 thread" on the CPU, "1 GPU, bf16" on CUDA: the rows' placement.
  std::string where() const {
    return gpu() ? "1 GPU, " + precision : "1 rank, " + plural(threads, "thread");
  }
};

// The milliseconds of fn, which queues work on be. Where be has a device
// clock (the host only queues work there) it is the device's time between
// a marker before fn's work and one after it (Backend::mark, marker_ms);
// elsewhere the host's, fn's work done when it returns. be is idle after it.
template <typename F>
double device_ms(Backend& be, F&& fn) {
  if (!be.caps().device_clock) {
    const auto t0 = Clock::now();
    fn();
    be.synchronize();
    return ms_since(t0);
  }
  be.mark(0);
  fn();
  be.mark(1);
  return be.marker_ms(0, 1);  // waits for the second marker
}

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

inline OptimizerConfig adamw(const GptArgs& a, const Model& m) {
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
      : be(be), args(a),
        model(be, parse_model_spec(a.model), Shape{a.tokens}, a.batch, a.vocab,
              parse_recompute(a.recompute),
              a.shard_params ? ModelStorage::kShardedParams : ModelStorage::kAllocated,
              logits_precision(a.precision, LossKind::kXent)),
        comm(a.shard_params ? be.make_communicator(MpiCommHandle{MPI_COMM_SELF})
                            : make_mpi_communicator(MPI_COMM_SELF)),
        sync(init_and_sync(a)), opt(be, adamw(a, model), model.num_params(), owned()),
        data(be, a, seed), stats(be, 2) {}
  // One step queued (train_step reads the NaN count back halfway, so the
  // host waits for its forward and backward, not for its optimizer).
  void queue_step() {
    if (!sync) {
      train_step(be, *comm, model, opt, LossKind::kXent, data.shard, std::uint64_t(args.batch),
                 args.lr, stats.get(), nullptr);
      return;
    }
    LayerEvents events{sync.get()};
    StepOptions o;
    o.sync = sync.get();
    o.events = &events;
    train_step(be, *comm, model, opt, LossKind::kXent, data.shard, std::uint64_t(args.batch),
               args.lr, stats.get(), o);
  }
  void step() {
    queue_step();
    be.synchronize();
  }
  Backend& be;
  const GptArgs& args;
  Model model;
  // --shard-params on one rank: the backend's own communicator (NCCL on a
  // GPU), whose gathers and reduce-scatters then copy to and from itself.
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<SyncStrategy> sync;  // null: train_step's replicated one
  Optimizer opt;
  TokenShard data;
  DeviceBuffer<float> stats;

 private:
  // The model initialized (seed 1), then --shard-params' strategy, which
  // initializes its slice likewise.
  std::unique_ptr<SyncStrategy> init_and_sync(const GptArgs& a) {
    model.init(1);
    if (!a.shard_params) return nullptr;
    Options o;
    o.shard_params = true;
    o.precision = a.precision;  // bf16: the gathers move bf16 copies
    return make_sync_strategy(o, {be, *comm, model, 0, 1, 1});
  }
  ArenaRange owned() const { return sync ? sync->owned() : ArenaRange{0, model.num_params()}; }
};

inline std::string format_g(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

inline std::string on_what(const GptArgs& a, const Model& m) {
  return std::to_string(m.num_params()) + " params, batch " + std::to_string(a.batch) + " x " +
         std::to_string(a.tokens) + " tokens, vocab " + std::to_string(a.vocab) + ", " + a.where();
}

// --- gemm: the step against its GEMMs, replayed ----------------------------------

// Each recorded call on operands of its own (random values), as many floats
// as its leading dimensions and strides reach. With `shared` (on a GPU) the
// calls of one shape share their operands: a GPT-2-sized step's calls, each
// with operands of its own, would take several times the model's memory.
class Replay {
 public:
  Replay(Backend& be, const std::vector<GemmCall>& calls, bool shared) : be_(be), calls_(calls) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    pool_.resize(std::size_t(1) << 20);
    for (float& v : pool_) v = u(rng);
    std::map<decltype(calls_[0].key()), Operands> seen;
    for (const GemmCall& g : calls_) {
      if (shared && seen.count(g.key())) {
        ops_.push_back(seen.at(g.key()));
        continue;
      }
      const int a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
      const int b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
      const std::size_t a_n = extent(a_rows, a_cols, g.lda, g.sa, g.batch);
      const std::size_t b_n = extent(b_rows, b_cols, g.ldb, g.sb, g.batch);
      const std::size_t c_n = extent(g.m, g.n, g.ldc, g.sc, g.batch);
      const bool aux = g.epilogue == int(Backend::GemmEpilogue::kBiasGeluTanh) ||
                       g.epilogue == int(Backend::GemmEpilogue::kGeluTanhGrad) ||
                       g.epilogue == int(Backend::GemmEpilogue::kBiasAdd);
      const std::size_t vector_n = std::size_t(std::max(g.m, g.n));
      ops_.push_back({buffer(a_n), buffer(b_n), buffer(c_n),
                      g.epilogue >= 0 ? buffer(vector_n) : nullptr,
                      aux ? buffer(c_n) : nullptr,
                      g.a_rounded ? rounded(a_n) : nullptr,
                      g.b_rounded ? rounded(b_n) : nullptr,
                      g.bf16_out ? rounded(c_n) : nullptr, g.bf16_out ? rounded(c_n) : nullptr,
                      g.bf16_out ? rounded(vector_n) : nullptr});
      seen.emplace(g.key(), ops_.back());
    }
  }
  void run(std::size_t i) {
    const GemmCall& g = calls_[i];
    const Operands& o = ops_[i];
    if (g.bf16_out)
      be_.gemm_epilogue_bf16(Backend::GemmEpilogue(g.epilogue), g.ta, g.tb, g.m, g.n, g.k,
                             {o.a, o.a16}, g.lda, {o.b, o.b16}, g.ldb, o.c16, g.ldc, o.aux16,
                             o.vector, o.vector16, o.c, o.aux);
    else if (g.epilogue >= 0)
      be_.gemm_epilogue(g.ta, g.tb, g.m, g.n, g.k, {o.a, o.a16}, g.lda, {o.b, o.b16}, g.ldb, o.c,
                        g.ldc, Backend::GemmEpilogue(g.epilogue), o.vector, o.aux);
    else if (g.batched)
      be_.gemm_batched(g.ta, g.tb, g.m, g.n, g.k, g.alpha, o.a, g.lda, g.sa, o.b, g.ldb, g.sb,
                       g.beta, o.c, g.ldc, g.sc, g.batch);
    else
      be_.gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, {o.a, o.a16}, g.lda, {o.b, o.b16}, g.ldb, g.beta,
               o.c, g.ldc);
  }
  void queue_all() {
    for (std::size_t i = 0; i < calls_.size(); ++i) run(i);
  }
  void run_all() {
    queue_all();
    be_.synchronize();
  }

 private:
  struct Operands {
    const float *a, *b;
    float *c, *vector;  // vector: an epilogue's bias or bias gradient
    float* aux;         // the gelu epilogues' GELU input
    const std::uint16_t *a16, *b16;  // bf16 copies, where the step had them
    std::uint16_t *c16, *aux16;       // the bf16 MLP fold's outputs
    const std::uint16_t* vector16;    // and its bias
  };
  static std::size_t extent(int rows, int cols, int ld, std::size_t stride, int batch) {
    return std::size_t(batch - 1) * stride + std::size_t(rows - 1) * ld + std::size_t(cols);
  }
  // n floats of the random pool, repeated as often as it takes.
  float* buffer(std::size_t n) {
    buffers_.emplace_back(be_, n);
    float* p = buffers_.back().get();
    for (std::size_t at = 0; at < n; at += pool_.size())
      be_.copy_to_device(p + at, pool_.data(), std::min(pool_.size(), n - at) * sizeof(float));
    return p;
  }

  // n bf16 values: the random pool's, rounded (only the time counts).
  std::uint16_t* rounded(std::size_t n) {
    rounded_.emplace_back(be_, n);
    std::uint16_t* p = rounded_.back().get();
    std::vector<std::uint16_t> bits(std::min(pool_.size(), n));
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_bits(pool_[i]);
    for (std::size_t at = 0; at < n; at += bits.size())
      be_.copy_to_device(p + at, bits.data(), std::min(bits.size(), n - at) * sizeof(std::uint16_t));
    return p;
  }

  Backend& be_;
  std::vector<GemmCall> calls_;
  std::vector<float> pool_;
  std::vector<DeviceBuffer<float>> buffers_;
  std::vector<DeviceBuffer<std::uint16_t>> rounded_;
  std::vector<Operands> ops_;
};

// The GEMMs one train_step of the GPT makes, in order (one recorded step).
// gemm: the step against its GEMMs replayed (gpt_gemm_rows.cpp).
std::vector<GemmCall> record_step(InstrumentedBackend& inst, Gpt& gpt);
void print_calls(Backend& be, Replay& replay, const std::vector<GemmCall>& calls, int repeats);
Row gemm_row(Backend& real, const GptArgs& a, const std::vector<GemmCall>& calls, Replay& replay,
             Gpt* recorded);
// layers: where the step's time goes per layer family (gpt_layer_rows.cpp).
// On a GPU every call is timed by device markers and the step's time is
// their sum; the baseline is `recorded` (the model the GEMMs were recorded
// from), or without it a model of its own on `real`.
std::vector<Row> layer_rows(Backend& real, InstrumentedBackend& inst, const GptArgs& a,
                            Replay& replay, Gpt* recorded);
// throughput: tokens/s of the step and its model FLOP utilization
// (gpt_throughput_row.cpp).
Row throughput_row(Backend& real, const GptArgs& a);
// attention: one causal attention layer's core, forward and backward
// (gpt_attention_row.cpp).
Row attention_row(Backend& be, const GptArgs& a, const AttentionShape& shape);

}  // namespace dptrain::bench
