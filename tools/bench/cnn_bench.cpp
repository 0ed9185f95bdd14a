// Implements: dptrain_cnn_bench, the CNN micro-benchmark rows of
// tools/bench/bench.py; rank 0 prints one JSON line per row:
//   conv  each conv layer's passes vs a bare oneDNN primitive (conv_rows.cpp)
//   bn    the share of a training step spent in bn's collectives (the
//         ReplicaSum calls of `bn` over the global batch), and the step
//         against the same one with `bn:local` (no collective)
// Usage: mpiexec -n P dptrain_cnn_bench <conv|bn|all> --model SPEC
//            [--input C,H,W] [--batch B] [--threads T] [--repeats N]
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <utility>

#include "backends/cpu/cpu_gemm.hpp"
#include "cnn_bench.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/run/options.hpp"
#include "parallel/gradient_buckets.hpp"
#include "train/train_step.hpp"

namespace dptrain::bench {
namespace {

constexpr const char* kUsage =
    "usage: mpiexec -n P dptrain_cnn_bench <conv|bn|all> --model SPEC [--input C,H,W]\n"
    "                                      [--batch B] [--threads T] [--repeats N]\n"
    "  --model SPEC  the network (a --model spec with conv and bn layers)\n"
    "  --input C,H,W sample shape (default 1,28,28)\n"
    "  --batch B     global batch, split across the ranks (default 128)\n"
    "  --threads T   compute threads per rank (default 1)\n"
    "  --repeats N   timed repeats per row (default: as many as fit a few seconds)\n";

int positive(const std::string& opt, const std::string& v) {
  int n = 0;
  try {
    n = std::stoi(v);
  } catch (const std::exception&) {
  }
  DPT_REQUIRE(n > 0, ExitCode::kUsage, opt + " needs a positive integer, not '" + v + "'");
  return n;
}

Shape parse_input(const std::string& v) {
  std::vector<int> d;
  std::stringstream in(v);
  for (std::string part; std::getline(in, part, ',');) d.push_back(positive("--input", part));
  DPT_REQUIRE(d.size() == 3 || d.size() == 4, ExitCode::kUsage, "--input: C,H,W or C,D,H,W");
  return d.size() == 3 ? Shape{d[0], d[1], d[2]} : Shape{d[0], d[1], d[2], d[3]};
}

CnnArgs parse_args(int argc, char** argv) {
  CnnArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      DPT_REQUIRE(i + 1 < argc, ExitCode::kUsage, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--model") a.model = value();
    else if (arg == "--input") a.input = parse_input(value());
    else if (arg == "--batch") a.batch = positive(arg, value());
    else if (arg == "--threads") a.threads = positive(arg, value());
    else if (arg == "--repeats") a.repeats = positive(arg, value());
    else if (arg == "-h" || arg == "--help") a.what = "help";
    else if (a.what.empty() && arg[0] != '-') a.what = arg;
    else throw Error(ExitCode::kUsage, "unexpected argument '" + arg + "'\n" + kUsage);
  }
  if (a.what == "help") return a;
  DPT_REQUIRE(a.what == "conv" || a.what == "bn" || a.what == "all", ExitCode::kUsage,
              "which benchmark: conv, bn or all\n" + std::string(kUsage));
  DPT_REQUIRE(!a.model.empty(), ExitCode::kUsage, "--model SPEC is needed");
  return a;
}

// bn's collectives, timed where they run: the model's ReplicaSum.
class TimedReplicaSum final : public ReplicaSum {
 public:
  explicit TimedReplicaSum(Communicator& comm) : comm_(comm) {}
  void sum(float* data, std::size_t n) override {
    const auto t0 = Clock::now();
    comm_.allreduce_sum(data, n);
    ms_ += ms_since(t0);
  }
  double take_ms() { return std::exchange(ms_, 0.0); }

 private:
  Communicator& comm_;
  double ms_ = 0.0;
};

// Every bn of specs (blocks included) made bn:local.
void make_bn_local(std::vector<LayerSpec>& specs) {
  for (LayerSpec& s : specs) {
    if (s.kind == "bn" && s.args.empty()) s = {"bn", {"local"}, "bn:local"};
    make_bn_local(s.inner);
  }
}

// One rank's tower of the CNN with what a training step needs, as the trainer has it.
struct Tower {
  Tower(Backend& be, Communicator& comm, std::vector<LayerSpec> specs, const CnnArgs& a, int rows)
      : model(be, specs, a.input, rows),
        opt(be, OptimizerConfig{}, model.num_params()),
        buckets(comm, model.grads(),
                plan_buckets(model.param_layout(), model.num_params(),
                             static_cast<std::size_t>(Options{}.bucket_mb * 1048576.0))) {
    model.init(1);
  }
  Model model;
  Optimizer opt;  // Adam
  GradientBuckets buckets;
};

// Element by element, the mean over the ranks of comm (on rank 0).
std::vector<double> mean_over_ranks(MPI_Comm comm, const std::vector<double>& mine) {
  int ranks = 1;
  DPT_MPI_CHECK(MPI_Comm_size(comm, &ranks));
  std::vector<double> sum(mine.size());
  DPT_MPI_CHECK(MPI_Reduce(mine.data(), sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE,
                           MPI_SUM, 0, comm));
  for (double& v : sum) v /= ranks;
  return sum;
}

// Fills this rank's shard with random features in [0, 1) and class labels.
void fill_shard(Shard& host, int rows, int dim, int classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  host.rows = rows;
  for (std::size_t i = 0; i < std::size_t(rows) * dim; ++i) host.features[i] = u(rng);
  for (int r = 0; r < rows; ++r) host.labels[r] = static_cast<std::int32_t>(rng() % classes);
}

std::vector<Row> bn_rows(const MpiSession& mpi, const CnnArgs& args) {
  auto be = make_backend("cpu", BackendOptions{args.threads});
  const DupComm dup(mpi.world());
  auto comm = make_mpi_communicator(dup.get());
  const int rank = mpi.rank(), ranks = mpi.size();
  const int rows = args.batch / ranks + (rank < args.batch % ranks ? 1 : 0);
  std::vector<LayerSpec> local_specs = parse_model_spec(args.model);
  make_bn_local(local_specs);
  Tower global(*be, *comm, parse_model_spec(args.model), args, rows);
  Tower local(*be, *comm, local_specs, args, rows);
  TimedReplicaSum replicas(*comm);
  const std::uint64_t first_row = std::uint64_t(rank) * (args.batch / ranks) +
                                  std::min(rank, args.batch % ranks);
  global.model.set_step({1, 0, first_row, std::uint64_t(args.batch), &replicas});
  local.model.set_step({1, 0, first_row, std::uint64_t(args.batch), nullptr});

  const int dim = static_cast<int>(args.input.size());
  ShardBuffers shard(*be, rows, dim, 1, LabelType::kClass);
  fill_shard(shard.host(), rows, dim, global.model.output_dim(), 5 + rank);
  const Shard& dev = shard.to_device();
  DeviceBuffer<float> stats(*be, 2);

  std::vector<double> step_ms, bn_ms;  // this rank's, every run of the global side
  auto step = [&](Tower& t) {
    const auto t0 = Clock::now();
    train_step(*be, *comm, t.model, t.opt, LossKind::kXent, dev, args.batch, 1e-3f, stats.get(),
               nullptr, &t.buckets);
    be->synchronize();
    return ms_since(t0);
  };
  const Side ours{nullptr, [&] {
                    step_ms.push_back(step(global));
                    bn_ms.push_back(replicas.take_ms());
                    return step_ms.back();
                  }};
  const Side base{nullptr, [&] { return step(local); }};
  const Samples s = alternate(mpi.world(), args.repeats, {3, 4.0, 5, 500}, ours, base);

  // The timed repeats (the warm-up runs came first): bn's share of each
  // rank's step, averaged over the ranks.
  step_ms.erase(step_ms.begin(), step_ms.end() - s.repeats);
  bn_ms.erase(bn_ms.begin(), bn_ms.end() - s.repeats);
  std::vector<double> share;
  for (int r = 0; r < s.repeats; ++r) share.push_back(bn_ms[r] / step_ms[r]);
  share = mean_over_ranks(mpi.world(), share);
  const std::vector<double> bn = mean_over_ranks(mpi.world(), bn_ms),
                            whole = mean_over_ranks(mpi.world(), step_ms);
  const std::string on = plural(ranks, "rank") + ", global batch " + std::to_string(args.batch);
  Row share_row{"bn collectives, share of the CNN step (" + plural(ranks, "rank") + ")", "",
                "ours = ms per step inside the bn layers' ReplicaSum calls (blocking all-reduce "
                "of the per-channel sums: waiting for the peer included), baseline = the step "
                "(train_step: forward, xent, backward with bucketed exchange, Adam), both "
                "averaged over ranks; ratio = their quotient, median of " +
                    plural(s.repeats, "repeat") + "; " + on,
                "", median(bn), median(whole), median(share)};
  Row cost_row = make_row("CNN step, bn over the global batch vs bn:local (" +
                              plural(ranks, "rank") + ")",
                          s, ours_over_base, "",
                          "ours = train_step with bn (statistics of the global batch: one "
                          "ReplicaSum per bn layer and pass); baseline = the same with bn:local "
                          "(no collective); max over ranks; " + on + "; ratio = ours / baseline");
  return {share_row, cost_row};
}

int run(const MpiSession& mpi, const CnnArgs& args) {
  auto emit = [&](const std::vector<Row>& rows) {
    if (mpi.rank() == 0)
      for (const Row& r : rows) print_row(r);
  };
  if (args.what == "conv" || args.what == "all") {
    if (mpi.rank() == 0) emit(conv_rows(args));
    idle_barrier(mpi.world());
  }
  if (args.what == "bn" || args.what == "all") emit(bn_rows(mpi, args));
  return 0;
}

}  // namespace
}  // namespace dptrain::bench

int main(int argc, char** argv) {
  using namespace dptrain;
  cpu_gemm::prepare(argv);
  MpiSession mpi(argc, argv);
  bench::CnnArgs args;
  try {
    args = bench::parse_args(argc, argv);  // every rank reaches the same verdict
  } catch (const Error& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "dptrain_cnn_bench: error: %s\n", e.what());
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
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);  // peers may be inside a collective
    return code;
  }
}
