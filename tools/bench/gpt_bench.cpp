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
// plus two JSON lines without "row" that gpt_rows.py turns into tables:
// {"gpt_gemm_calls": [...]}, the bare time of each distinct GEMM of the
// step, and {"gpt_families": [...]}, the layers row's figures per family.
// Usage: dptrain_gpt_bench <gemm|layers|all> --model SPEC [--tokens T]
//            [--vocab V] [--batch B] [--threads T] [--repeats N] [--warmup N]
//            [--lr LR] [--beta2 B2] [--weight-decay W] [--clip-grad-norm C]
//            [--weight-decay-params all|matrices]
#include "gpt_bench.hpp"

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

int run(const MpiSession& mpi, const GptArgs& a) {
  if (mpi.rank() == 0) {
    auto real = make_backend("cpu", BackendOptions{a.threads});
    InstrumentedBackend inst(*real);
    const std::vector<GemmCall> calls = record_step(inst, a);
    Replay replay(*real, calls);
    if (a.what == "gemm" || a.what == "all") {
      print_row(gemm_row(*real, a, calls, replay));
      print_calls(replay, calls);
    }
    if (a.what == "layers" || a.what == "all")
      for (const Row& r : layer_rows(*real, inst, a, replay)) print_row(r);
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
