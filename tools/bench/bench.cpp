// Implements: dptrain_bench, the micro-benchmark rows of tools/bench/bench.py.
// Each row times one piece of dptrain against the bare library call beneath
// it, both in this process and in alternation, and rank 0 prints one JSON
// line per row:
//   gemm      train_step on 1 rank        vs its GEMMs through the same library
//             (on cuda also with --cuda-graphs on: the step replayed as a graph)
//   exchange  GradientBuckets (default --bucket-mb) vs one MPI_Allreduce of the arena
//   input     Dataset+InputQueue+Scatter  vs H5Dread of the whole set
// Usage: mpiexec -n P dptrain_bench <gemm|exchange|input|all>
//            [--threads T] [--repeats N] [--warmup N] [--batch N] [--data FILE]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_gemm.hpp"
#include "bench_rows.hpp"
#include "cnn_step_row.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"
#include "input_epoch_row.hpp"
#include "parallel/gradient_buckets.hpp"
#include "train/step_graphs.hpp"
#include "train/train_step.hpp"

namespace dptrain::bench {
namespace {

constexpr const char* kUsage =
    "usage: mpiexec -n P dptrain_bench <gemm|cnn|exchange|input|all> [--threads T]\n"
    "                                  [--repeats N] [--warmup N] [--batch N]\n"
    "                                  [--data FILE]\n"
    "  --threads T   compute threads per rank (default 1)\n"
    "  --repeats N   timed repeats per row (default: as many as fit about 3 s)\n"
    "  --warmup N    untimed pairs before them (default: the row's own, 1 to 20)\n"
    "  --batch N     rows per step of the gemm and cnn rows (default 128)\n"
    "  --data FILE   HDF5 file with /train/features and /train/labels (input row)\n"
    "  --device D    cpu (default) or cuda: the gemm and cnn rows on the GPU (cuBLAS, cuDNN)\n"
    "  --precision P fp32 (default), tf32 or bf16 (cuda only)\n";

struct Args {
  std::string what;
  int threads = 1;
  RowRun run;  // --repeats, --warmup, --batch
  std::string data;
  std::string device = "cpu", precision = "fp32";
};

Args parse_args(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    DPT_REQUIRE(i + 1 < argc, ExitCode::kUsage, std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto positive = [](const std::string& opt, const std::string& v) {
    int n = 0;
    try {
      n = std::stoi(v);
    } catch (const std::exception&) {
    }
    DPT_REQUIRE(n > 0, ExitCode::kUsage, opt + " needs a positive integer, not '" + v + "'");
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads") a.threads = positive(arg, value(i));
    else if (arg == "--repeats") a.run.repeats = positive(arg, value(i));
    else if (arg == "--warmup") a.run.warmup = positive(arg, value(i));
    else if (arg == "--batch") a.run.rows = positive(arg, value(i));
    else if (arg == "--data") a.data = value(i);
    else if (arg == "--device") a.device = value(i);
    else if (arg == "--precision") a.precision = value(i);
    else if (arg == "-h" || arg == "--help") a.what = "help";
    else if (a.what.empty() && arg[0] != '-') a.what = arg;
    else throw Error(ExitCode::kUsage, "unexpected argument '" + arg + "'\n" + kUsage);
  }
  if (a.what == "help") return a;
  DPT_REQUIRE(a.what == "gemm" || a.what == "cnn" || a.what == "exchange" || a.what == "input" ||
                  a.what == "all",
              ExitCode::kUsage,
              "which benchmark: gemm, cnn, exchange, input or all\n" + std::string(kUsage));
  DPT_REQUIRE(a.what != "input" || !a.data.empty(), ExitCode::kUsage, "input needs --data FILE");
  DPT_REQUIRE(a.device == "cpu" || a.device == "cuda", ExitCode::kUsage, "--device: cpu or cuda");
  DPT_REQUIRE(a.precision == "fp32" || a.precision == "tf32" || a.precision == "bf16",
              ExitCode::kUsage, "--precision: fp32, tf32 or bf16");
  return a;
}

BackendOptions backend_options(const Args& args) {
  BackendOptions bo;
  bo.threads = args.threads;
  bo.precision = args.precision == "tf32"   ? Precision::kTf32
                 : args.precision == "bf16" ? Precision::kBf16
                                            : Precision::kFp32;
  return bo;
}

std::string placement(const Args& args) {
  return args.device == "cuda" ? "1 GPU, " + args.precision
                               : "1 rank, " + plural(args.threads, "thread");
}

// --- gemm: one training step against the GEMMs inside it ----------------------
struct Gemm {
  bool ta, tb;
  int m, n, k;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float* c;
  int ldc;
};

// The GEMMs of Model::forward and Model::backward of an MLP, same shapes and
// layouts: y = x W^T per dense layer; then, last layer first, dW = dy^T x
// and (all but the first layer) dx = dy W; on operands of their own,
// uniform in [-1, 1).
struct MlpGemms {
  MlpGemms(Backend& be, const Model& model, int batch, std::mt19937& rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    buffers.reserve(32);  // pointers into it are kept
    auto buffer = [&](int rows, int cols) {
      std::vector<float> host(std::size_t(rows) * cols);
      for (float& v : host) v = uniform(rng);
      buffers.emplace_back(be, host.size());
      be.copy_to_device(buffers.back().get(), host.data(), host.size() * sizeof(float));
      return buffers.back().get();
    };
    std::vector<Gemm> backward;
    bool first_layer = true;
    for (const ParamInfo& p : model.param_layout()) {
      if (p.name != "weight") continue;  // the dense weights [out, in] give the GEMM shapes
      const int in = static_cast<int>(p.shape[1]), out = static_cast<int>(p.shape[0]);
      float *x = buffer(batch, in), *w = buffer(out, in), *dy = buffer(batch, out);
      gemms.push_back({false, true, batch, out, in, x, in, w, in, buffer(batch, out), out});
      std::vector<Gemm> layer{{true, false, out, in, batch, dy, out, x, in, buffer(out, in), in}};
      if (!first_layer)
        layer.push_back({false, false, batch, in, out, dy, out, w, in, buffer(batch, in), in});
      backward.insert(backward.begin(), layer.begin(), layer.end());
      first_layer = false;
    }
    gemms.insert(gemms.end(), backward.begin(), backward.end());
  }

  std::vector<Gemm> gemms;  // forward's, then backward's
  std::vector<DeviceBuffer<float>> buffers;
};

std::vector<Row> bench_gemm(const MpiSession& mpi, const Args& args) {
  const bool cuda = args.device == "cuda";
  const std::string name = "step vs bare GEMMs (" + placement(args) + ")";
  if (mpi.rank() != 0) {
    idle_barrier(mpi.world());
    return {Row{}};
  }
  constexpr int kInput = 784;
  const int kBatch = args.run.rows;
  auto be = make_backend(args.device, backend_options(args));
  auto comm = make_mpi_communicator(MPI_COMM_SELF);
  Model model(*be, parse_model_spec("dense:256,relu,dense:256,relu,dense:10"), kInput, kBatch);
  model.init(1);
  Optimizer opt(*be, OptimizerConfig{}, model.num_params());  // Adam
  DeviceBuffer<float> stats(*be, 2);

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ShardBuffers shard(*be, kBatch, kInput, 1, LabelType::kClass);
  Shard& host = shard.host();
  host.rows = kBatch;
  for (std::size_t i = 0; i < std::size_t(kBatch) * kInput; ++i) host.features[i] = uniform(rng);
  for (int r = 0; r < kBatch; ++r) host.labels[r] = static_cast<std::int32_t>(rng() % 10);
  const Shard& dev = shard.to_device();

  const MlpGemms bare(*be, model, kBatch, rng);
  const std::vector<Gemm>& gemms = bare.gemms;

  // Both sides end with the device idle (train_step reads a count back;
  // synchronize() is free on the CPU).
  const Side ours{nullptr, [&] {
                    const auto t0 = Clock::now();
                    train_step(*be, *comm, model, opt, LossKind::kXent, dev, kBatch, 1e-3f,
                               stats.get(), nullptr);
                    be->synchronize();
                    return ms_since(t0);
                  }};
  const Side base{nullptr, [&] {
                    const auto t0 = Clock::now();
                    for (const Gemm& g : gemms) {
                      if (cuda)  // the backend's GEMM is the bare cuBLAS call
                        be->gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, g.a, g.lda, g.b, g.ldb, 0.0f,
                                 g.c, g.ldc);
                      else
                        cpu_gemm::sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, g.a, g.lda, g.b, g.ldb,
                                        0.0f, g.c, g.ldc);
                    }
                    be->synchronize();
                    return ms_since(t0);
                  }};
  const Samples s = alternate(MPI_COMM_SELF, args.run.repeats,
                              with_warmup({20, 3.0, 20, 5000}, args.run.warmup), ours, base);
  std::vector<Row> rows;
  if (cuda) {  // the same step with --cuda-graphs: forward, loss and backward one launch
    StepGraphs graphs(*be);
    const Side graphed{nullptr, [&] {
                         const auto t0 = Clock::now();
                         train_step(*be, *comm, model, opt, LossKind::kXent, dev, kBatch, 1e-3f,
                                    stats.get(), nullptr, nullptr, nullptr, nullptr, &graphs);
                         be->synchronize();
                         return ms_since(t0);
                       }};
    const Samples g = alternate(MPI_COMM_SELF, args.run.repeats,
                                with_warmup({20, 3.0, 20, 5000}, args.run.warmup), graphed, base);
    rows.push_back(make_row(
        "step vs bare GEMMs, --cuda-graphs on (" + placement(args) + ")", g, ours_over_base,
        "<= 1.2",
        "ours = the train_step of the row above with its forward, xent and backward " +
            (graphs.replays() ? std::string("replayed as a CUDA graph")
                              : "NOT recorded (" + graphs.take_failure() + "): as usual") +
            "; baseline and ratio as there"));
  }
  idle_barrier(mpi.world());
  rows.insert(rows.begin(), make_row(name, s, ours_over_base, "<= 1.2",
                  "ours = train_step (forward, xent, backward, Adam over " +
                      std::to_string(model.num_params()) + " params) of MLP 784-256-256-10 on " +
                      std::to_string(kBatch) + " rows; baseline = its " +
                      plural(static_cast<long>(gemms.size()), "GEMM") +
                      (cuda ? " (cublasGemmEx through the backend, same shapes and precision)"
                            : " (" + cpu_gemm::describe() + ", same shapes)") +
                      " back to back; ratio = ours / baseline"));
  return rows;
}

// --- cnn: the demo CNN's step against its library passes (cnn_step_row.cpp) ---
std::vector<Row> bench_cnn(const MpiSession& mpi, const Args& args) {
  std::vector<Row> r;
  if (mpi.rank() == 0) {
    auto be = make_backend(args.device, backend_options(args));
    r = cnn_step_rows(*be, args.run, placement(args), args.device == "cuda");
  }
  idle_barrier(mpi.world());
  return r;
}

std::string format_mib(double mib) {
  char text[32];
  std::snprintf(text, sizeof text, "%g MiB", mib);
  return text;
}

// --- exchange: bucketed gradient all-reduce against one MPI_Allreduce -----------
Row bench_exchange(const MpiSession& mpi, const Args& args, int layers) {
  auto be = make_backend("cpu", BackendOptions{args.threads});
  std::string spec;
  for (int i = 0; i < layers; ++i) spec += (i ? ",relu,dense:256" : "dense:256");
  Model model(*be, parse_model_spec(spec), 256, 1);
  const std::size_t n = model.num_params();
  // The trainer's default --bucket-mb.
  const double bucket_mb = Options{}.bucket_mb;
  const auto kBucketBytes = static_cast<std::size_t>(bucket_mb * 1048576.0);
  auto comm = make_mpi_communicator(mpi.world());
  GradientBuckets buckets(*comm, model.grads(),
                          plan_buckets(model.param_layout(), n, kBucketBytes));
  const DupComm raw(MPI_COMM_WORLD);
  std::vector<float> raw_buf(n);

  // Driven as Model::backward drives it, with no compute between layers.
  const std::vector<std::size_t> begins = layer_begins(model.param_layout());
  const Side ours{[&] { be->fill(model.grads(), 1.0f, n); },
                  [&] {
                    const auto t0 = Clock::now();
                    buckets.begin_step();
                    for (std::size_t i = begins.size(); i-- > 0;) {
                      buckets.grads_ready(begins[i]);
                      if (i > 0) buckets.between_layers();
                    }
                    buckets.finish();
                    return ms_since(t0);
                  }};
  const Side base{[&] { std::fill(raw_buf.begin(), raw_buf.end(), 1.0f); },
                  [&] {
                    const auto t0 = Clock::now();
                    DPT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, raw_buf.data(), static_cast<int>(n),
                                                MPI_FLOAT, MPI_SUM, raw.get()));
                    return ms_since(t0);
                  }};
  const Samples s = alternate(mpi.world(), args.run.repeats,
                              with_warmup({20, 3.0, 20, 20000}, args.run.warmup), ours, base);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.3g MiB", double(n) * sizeof(float) / 1048576.0);
  return make_row("gradient exchange, " + std::to_string(layers) + " layers (" + mib + "), " +
                      plural(mpi.size(), "rank"),
                  s, ours_over_base, "<= 1.1",
                  plural(static_cast<long>(buckets.plan().size()), "bucket") +
                      " (plan_buckets, " + format_mib(bucket_mb) + ") of " + std::to_string(layers) +
                      " dense 256x256 layers, no compute between layers; baseline = one "
                      "MPI_Allreduce of " + std::to_string(n) +
                      " floats on a dup of MPI_COMM_WORLD; max over ranks; ratio = ours / baseline" +
                      (mpi.size() == 1 ? "; 1 rank: nothing is sent, both sides are call overhead"
                                       : ""));
}

int run(const MpiSession& mpi, const Args& args) {
  auto emit = [&](const Row& r) {
    if (mpi.rank() == 0) print_row(r);
  };
  if (args.what == "gemm" || args.what == "all")
    for (const Row& r : bench_gemm(mpi, args)) emit(r);
  if (args.what == "cnn")  // not in all: the GPU check runs it
    for (const Row& r : bench_cnn(mpi, args)) emit(r);
  if (args.what == "exchange" || args.what == "all")
    for (int layers : {2, 10, 50}) emit(bench_exchange(mpi, args, layers));
  if (args.what == "input" || args.what == "all") {
    if (args.data.empty()) {
      Row r;
      r.name = "input pipeline epoch vs raw HDF5 read, " + plural(mpi.size(), "rank");
      r.status = "skipped";
      r.note = "needs --data FILE";
      emit(r);
    } else {
      emit(input_epoch_row(mpi, args.data, args.threads, args.run));
    }
  }
  return 0;
}

}  // namespace
}  // namespace dptrain::bench

int main(int argc, char** argv) {
  using namespace dptrain;
  cpu_gemm::prepare(argv);  // the GEMM kernel dptrain itself would run
  MpiSession mpi(argc, argv);
  bench::Args args;
  try {
    // Every rank parses the same argv, so every rank reaches the same verdict.
    args = bench::parse_args(argc, argv);
  } catch (const Error& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "dptrain_bench: error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  if (args.what == "help") {
    if (mpi.rank() == 0) std::fputs(bench::kUsage, stdout);
    return 0;
  }
  try {
    return bench::run(mpi, args);
  } catch (const AgreedFailure& e) {
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    const Error* err = dynamic_cast<const Error*>(&e);
    report_error(err ? err->message() : e.what(), mpi.rank(), mpi.size());
    const int code = static_cast<int>(err ? err->code() : ExitCode::kOther);
    std::fflush(stderr);
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);  // peers may be inside a collective
    return code;
  }
}
