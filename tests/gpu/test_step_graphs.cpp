// Implements: the tests of --cuda-graphs (src/train/step_graphs.hpp): a
// step whose forward, loss and backward are replayed as a CUDA graph trains
// bit for bit as the same step queued call by call, in fp32, tf32 and bf16:
// the demo CNN (conv, bn over the batch, pooling, dropout) and a small GPT
// (embedding, positions, layer norm, causal attention, gelu:tanh, dropout,
// bf16 logits under bf16). Each run alternates two shard buffers, as the
// input pipeline does, with new contents every step, and every third step
// is a shorter batch in a third buffer: three graphs, each recorded at its
// second step and replayed from then on, which must read each step's shard,
// dropout draw, parameters and loss scale, not those of the step it was
// recorded at.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/model/shard.hpp"
#include "gpu_env.hpp"
#include "training_support.hpp"
#include "train/step_graphs.hpp"
#include "train/train_step.hpp"

namespace dptrain {
namespace {

constexpr int kRows = 6, kShortRows = 4, kSteps = 12;

struct Job {
  std::string spec;
  Shape input;
  int vocab = 0;    // token ids under this vocabulary, one label a position; 0: features
  int classes = 0;  // classes of a feature model
};

const Job kDemoCnn{
    "conv:8:3,bn,relu,maxpool:2,conv:16:3,bn,relu,maxpool:2,dense:32,relu,dropout:0.3,dense:10",
    Shape{1, 12, 12}, 0, 10};
const Job kSmallGpt{
    "embed:16,pos,res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dropout:0.2,dense:16),ln,"
    "dense:11",
    Shape{8}, 11, 0};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

struct Trained {
  std::vector<float> losses, params, buffers;
  std::size_t graphs = 0;
  std::uint64_t replays = 0;
};

// One shard buffer: features (or int32 token ids) and labels.
struct ShardSlot {
  ShardSlot(Backend& be, const Job& job, int rows)
      : x(be, std::size_t(rows) * job.input.size()),
        y(be, std::size_t(rows) * std::size_t(job.vocab ? job.input.size() : 1)) {}
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
};

// New contents for `slot`, drawn from `seed`.
Shard refill(Backend& be, const Job& job, ShardSlot& slot, int rows, std::uint32_t seed) {
  std::vector<float> x = gpu_test::random_vector(std::size_t(rows) * job.input.size(), seed);
  const int per_row = job.vocab ? static_cast<int>(job.input.size()) : 1;
  std::vector<std::int32_t> y =
      gpu_test::random_labels(rows * per_row, job.vocab ? job.vocab : job.classes, seed + 1);
  if (job.vocab)  // the ids themselves, as the input pipeline hands them to embed
    std::memcpy(x.data(), y.data(), x.size() * sizeof(float));
  be.copy_to_device(slot.x.get(), x.data(), x.size() * sizeof(float));
  be.copy_to_device(slot.y.get(), y.data(), y.size() * sizeof(std::int32_t));
  Shard s;
  s.rows = rows;
  s.features = slot.x.get();
  s.labels = slot.y.get();
  return s;
}

Trained train(Precision p, const Job& job, bool graphed) {
  auto be = gpu_test::make_gpu(p);
  auto comm = be->make_communicator(MpiCommHandle{MPI_COMM_SELF});
  const char* precision = p == Precision::kBf16 ? "bf16" : "fp32";  // of the logits
  Model model(*be, parse_model_spec(job.spec), job.input, kRows, job.vocab, Recompute::kNone,
              ModelStorage::kAllocated, logits_precision(precision, LossKind::kXent));
  model.init(3);
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdamW;
  cfg.weight_decay = 0.1f;
  Optimizer opt(*be, cfg, model.num_params());
  DeviceBuffer<float> stats(*be, 2);
  std::vector<std::unique_ptr<ShardSlot>> slots;
  for (int rows : {kRows, kRows, kShortRows})
    slots.push_back(std::make_unique<ShardSlot>(*be, job, rows));
  StepGraphs graphs(*be);
  Trained t;
  for (int step = 0; step < kSteps; ++step) {
    const int which = step % 3, rows = which == 2 ? kShortRows : kRows;
    const Shard shard = refill(*be, job, *slots[std::size_t(which)], rows, 100u + 7u * step);
    StepInfo info;
    info.seed = 11;
    info.epoch = std::uint64_t(step) / 3;
    info.first_row = std::uint64_t(step) * kRows;
    info.batch_rows = std::uint64_t(rows);
    model.set_step(info);
    be->fill(stats.get(), 0.0f, 2);
    const bool finite =
        train_step(*be, *comm, model, opt, LossKind::kXent, shard, std::uint64_t(rows), 1e-2f,
                   stats.get(), nullptr, nullptr, nullptr, nullptr, graphed ? &graphs : nullptr);
    EXPECT_TRUE(finite) << "step " << step;
    t.losses.push_back(gpu_test::download(*be, stats.get(), 1)[0]);
  }
  t.params = gpu_test::download(*be, model.params(), model.num_params());
  if (model.num_buffers()) t.buffers = gpu_test::download(*be, model.buffers(), model.num_buffers());
  t.graphs = graphs.graphs();
  t.replays = graphs.replays();
  EXPECT_EQ(graphs.take_failure(), "");
  return t;
}

void expect_graphs_train_as_calls(const Job& job) {
  for (const Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    SCOPED_TRACE(p == Precision::kFp32 ? "fp32" : p == Precision::kTf32 ? "tf32" : "bf16");
    const Trained calls = train(p, job, false), graphs = train(p, job, true);
    // Each of the 3 keys: its first step as usual, then recorded and replayed.
    EXPECT_EQ(graphs.graphs, 3u);
    EXPECT_EQ(graphs.replays, std::uint64_t(kSteps - 3));
    EXPECT_EQ(calls.graphs, 0u);
    EXPECT_EQ(bits(graphs.losses), bits(calls.losses));
    EXPECT_EQ(bits(graphs.params), bits(calls.params));
    EXPECT_EQ(bits(graphs.buffers), bits(calls.buffers));
  }
}

TEST(StepGraphs, TheDemoCnnTrainsBitwiseAsWithoutGraphs) { expect_graphs_train_as_calls(kDemoCnn); }

TEST(StepGraphs, ASmallGptTrainsBitwiseAsWithoutGraphs) { expect_graphs_train_as_calls(kSmallGpt); }

// The CPU backend records nothing: the step runs as usual and says why once.
TEST(StepGraphs, TheCpuRunsEachStepAsUsualAndSaysWhyOnce) {
  auto be = gpu_test::make_cpu();
  StepGraphs graphs(*be);
  int ran = 0;
  const StepGraphKey key{nullptr, nullptr, nullptr, nullptr, 4, 0.25f};
  EXPECT_FALSE(graphs.run(key, [&] { ++ran; }));  // the first step of a key: as usual
  EXPECT_FALSE(graphs.run(key, [&] { ++ran; }));  // its recording fails
  EXPECT_EQ(ran, 0) << "the caller runs the pass";
  EXPECT_FALSE(graphs.active());
  EXPECT_NE(graphs.take_failure().find("cpu backend"), std::string::npos);
  EXPECT_EQ(graphs.take_failure(), "") << "said once";
  EXPECT_FALSE(graphs.run(key, [&] { ++ran; }));
  EXPECT_EQ(graphs.graphs(), 0u);
}

}  // namespace
}  // namespace dptrain
