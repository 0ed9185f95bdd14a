// Implements: dptrain_gpt_bench, the GPT micro-benchmark rows of
// tools/bench/bench.py (tools/bench/gpt_rows.py) and of the GPU check
// (tools/gpu-check.sh); one rank, on the CPU backend or one GPU (--device
// cuda, --precision), rank 0 prints one JSON line per row:
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
//           calls run; and that driven step against train_step (on a GPU
//           every call, GEMMs included, timed by device markers, and the
//           driven step's time the sum of its calls')
//   throughput  tokens/s of the training step and its model FLOP
//           utilization, 6 N + 12 L T D FLOPs per token against
//           --peak-tflops (gpt_throughput_row.cpp says what is counted)
//   attention  one causal attention layer's core (the layer less its
//           projections), forward and backward, per --attention-shape, as
//           --attention computes it (gpt_attention_row.cpp); needs no --model
// plus JSON lines without "row": {"gpt_gemm_calls": [...]}, the bare time
// of each distinct GEMM of the step, and {"gpt_families": [...]}, the
// layers row's figures per family, that gpt_rows.py turns into tables;
// {"gpt_throughput": {...}}, the throughput row's figures, which
// tools/gpu-check.sh reads. On CUDA every time is device time (markers).
// Usage: dptrain_gpt_bench <gemm|layers|throughput|attention|all>[,...] --model SPEC
//            [--tokens T] [--vocab V] [--batch B] [--threads T] [--repeats N]
//            [--warmup N] [--device cpu|cuda] [--precision fp32|tf32|bf16]
//            [--peak-tflops X] [--lr LR] [--beta2 B2] [--weight-decay W]
//            [--clip-grad-norm C] [--weight-decay-params all|matrices]
//            [--attention auto|math|fused|cudnn] [--attention-shape N,H,T,hd[/...]]
//            [--recompute none|blocks] [--shard-params]
#include "dptrain/backends/backend_factory.hpp"
#include "gpt_bench.hpp"

namespace dptrain::bench {
namespace {


constexpr const char* kUsage =
    "usage: dptrain_gpt_bench <gemm|layers|throughput|attention|all>[,...] --model SPEC\n"
    "                         [--tokens T]\n"
    "                         [--vocab V] [--batch B] [--threads T] [--repeats N]\n"
    "                         [--warmup N] [--device cpu|cuda] [--precision P]\n"
    "                         [--peak-tflops X] [--lr LR] [--beta2 B2] [--weight-decay W]\n"
    "                         [--clip-grad-norm C] [--weight-decay-params all|matrices]\n"
    "                         [--attention IMPL] [--attention-shape N,H,T,hd[/N,H,T,hd...]]\n"
    "  rows          gemm (step vs its GEMMs), layers (time per layer family),\n"
    "                throughput (tokens/s and MFU), attention (one causal layer's core\n"
    "                forward and backward per --attention-shape; no --model needed);\n"
    "                all = gemm,layers; or a list: gemm,throughput\n"
    "  --model SPEC  a sequence model starting with embed:D (res blocks of plain layers)\n"
    "  --tokens T    positions per sample (default 64)\n"
    "  --vocab V     vocabulary (default 256, bytes)\n"
    "  --batch B     rows per step (default 32)\n"
    "  --threads T   compute threads (default 1)\n"
    "  --repeats N   timed repeats per row (default: as many as fit a few seconds)\n"
    "  --warmup N    untimed pairs (throughput: steps) first (default 3)\n"
    "  --device D    cpu (default) or cuda: one GPU, device time\n"
    "  --precision P fp32 (default), tf32 or bf16 (cuda only)\n"
    "  --peak-tflops X  the device's peak in TFLOPS for MFU (throughput; default: unknown)\n"
    "  --attention I auto (default), math, fused or cudnn: as dptrain train's --attention\n"
    "  --attention-shape N,H,T,hd  the attention rows' shapes, '/' between them\n"
    "  --recompute W none (default) or blocks: as dptrain train's --recompute (throughput)\n"
    "  --shard-params  the step of dptrain train --shard-params on one rank (throughput)\n"
    "                (default 8,12,1024,64/4,16,2048,64)\n"
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

std::vector<std::string> rows_of(const std::string& list) {
  std::vector<std::string> rows;
  std::stringstream in(list);
  for (std::string r; std::getline(in, r, ',');) {
    if (r == "all") {
      rows.insert(rows.end(), {"gemm", "layers"});
      continue;
    }
    DPT_REQUIRE(r == "gemm" || r == "layers" || r == "throughput" || r == "attention",
                ExitCode::kUsage,
                "which benchmark: gemm, layers, throughput, attention or all, not '" + r + "'\n" +
                    kUsage);
    rows.push_back(r);
  }
  return rows;
}

// "N,H,T,hd/N,H,T,hd..." -> the shapes.
std::vector<AttentionShape> attention_shapes(const std::string& list) {
  std::vector<AttentionShape> shapes;
  std::stringstream in(list);
  for (std::string one; std::getline(in, one, '/');) {
    std::stringstream parts(one);
    std::vector<int> v;
    for (std::string p; std::getline(parts, p, ',');) v.push_back(positive("--attention-shape", p));
    DPT_REQUIRE(v.size() == 4, ExitCode::kUsage,
                "--attention-shape: N,H,T,hd (four positive integers), not '" + one + "'");
    shapes.push_back({v[0], v[1], v[2], v[3]});
  }
  return shapes;
}

double real_number(const std::string& opt, const std::string& v) {
  try {
    return std::stod(v);
  } catch (const std::exception&) {
    throw Error(ExitCode::kUsage, opt + " needs a number, not '" + v + "'");
  }
}

GptArgs parse_args(int argc, char** argv) {
  GptArgs a;
  bool help = false;
  std::string rows;
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
    else if (arg == "--device") a.device = value();
    else if (arg == "--precision") a.precision = value();
    else if (arg == "--peak-tflops") a.peak_tflops = real_number(arg, value());
    else if (arg == "--lr") a.lr = number(arg, value());
    else if (arg == "--beta2") a.beta2 = number(arg, value());
    else if (arg == "--weight-decay") a.weight_decay = number(arg, value());
    else if (arg == "--clip-grad-norm") a.clip = number(arg, value());
    else if (arg == "--weight-decay-params") a.decay_all = parse_decay_all(value());
    else if (arg == "--attention") a.attention = value();
    else if (arg == "--attention-shape") a.attention_shapes = attention_shapes(value());
    else if (arg == "--recompute") a.recompute = value();
    else if (arg == "--shard-params") a.shard_params = true;
    else if (arg == "-h" || arg == "--help") help = true;
    else if (rows.empty() && arg[0] != '-') rows = arg;
    else throw Error(ExitCode::kUsage, "unexpected argument '" + arg + "'\n" + kUsage);
  }
  if (help) {
    a.what = {"help"};
    return a;
  }
  DPT_REQUIRE(!rows.empty(), ExitCode::kUsage,
              "which benchmark: gemm, layers, throughput or all\n" + std::string(kUsage));
  a.what = rows_of(rows);
  const bool attention_only = std::all_of(a.what.begin(), a.what.end(),
                                          [](const std::string& r) { return r == "attention"; });
  DPT_REQUIRE(!a.model.empty() || attention_only, ExitCode::kUsage, "--model SPEC is needed");
  parse_attention(a.attention);
  if (a.attention_shapes.empty()) a.attention_shapes = attention_shapes("8,12,1024,64/4,16,2048,64");
  DPT_REQUIRE(a.device == "cpu" || a.device == "cuda", ExitCode::kUsage, "--device: cpu or cuda");
  DPT_REQUIRE(a.precision == "fp32" || a.precision == "tf32" || a.precision == "bf16",
              ExitCode::kUsage, "--precision: fp32, tf32 or bf16");
  DPT_REQUIRE(a.peak_tflops >= 0, ExitCode::kUsage, "--peak-tflops: a number of TFLOPS (0: unknown)");
  return a;
}

int run(const MpiSession& mpi, const GptArgs& a) {
  if (mpi.rank() == 0) {
    BackendOptions bo;
    bo.threads = a.threads;
    bo.precision = parse_precision(a.precision);
    bo.attention = parse_attention(a.attention);
    auto real = make_backend(a.device, bo);
    if (a.wants("gemm") || a.wants("layers")) {
      InstrumentedBackend inst(*real);
      auto gpt = std::make_unique<Gpt>(inst, a, 5);
      const std::vector<GemmCall> calls = record_step(inst, *gpt);
      // The CPU rows time a model on the backend itself, as measured in
      // docs/performance.md; on a GPU the recorded model is the one timed
      // (a GPT-2-sized model and the replay's operands fit once, not twice;
      // the layers row holds it and its opened-up twin).
      if (!a.gpu()) gpt.reset();
      Replay replay(*real, calls, a.gpu());
      if (a.wants("gemm")) {
        print_row(gemm_row(*real, a, calls, replay, gpt.get()));
        print_calls(*real, replay, calls, a.repeats);
      }
      if (a.wants("layers"))
        for (const Row& r : layer_rows(*real, inst, a, replay, gpt.get())) print_row(r);
    }
    if (a.wants("throughput")) print_row(throughput_row(*real, a));
    if (a.wants("attention"))
      for (const AttentionShape& s : a.attention_shapes) print_row(attention_row(*real, a, s));
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
  if (args.wants("help")) {
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
