// Overlap must not change results: bucketed gradient all-reduces (any bucket
// size) give bitwise the sums of one all-reduce of the whole arena, whole
// training steps with buckets give bitwise the weights of steps without, and
// the double-buffered input pipeline delivers exactly the shards of the
// blocking scatter, in order.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/optimizer.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"
#include "parallel/gradient_buckets.hpp"
#include "train/train_step.hpp"

namespace dptrain {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A model with many small layers and one large one, so plans have many
// buckets and buckets of very different sizes.
const char* kSpec = "dense:300,relu,dense:7,tanh,dense:5,relu,dense:64,relu,dense:3,dense:2";
constexpr int kDim = 11;

TEST(Buckets, PlanCoversTheArenaLastLayerFirstAtLayerBoundaries) {
  auto be = make_backend("cpu", BackendOptions{});
  Model model(*be, parse_model_spec(kSpec), kDim, 4);
  for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(64), std::size_t(4096),
                            std::size_t(1) << 30}) {
    const auto plan = plan_buckets(model.param_layout(), model.num_params(), bytes);
    const std::vector<std::size_t> begins = layer_begins(model.param_layout());
    ASSERT_FALSE(plan.empty());
    EXPECT_EQ(plan.front().end, model.num_params());
    EXPECT_EQ(plan.back().begin, 0u);
    for (std::size_t i = 1; i < plan.size(); ++i) EXPECT_EQ(plan[i].end, plan[i - 1].begin);
    for (const BucketRange& b : plan) {
      bool at_layer = false;
      for (std::size_t begin : begins) at_layer |= begin == b.begin;
      EXPECT_TRUE(at_layer) << "bucket starts inside a layer";
      // Every bucket but the one holding the first layer reaches the size.
      if (b.begin != 0) EXPECT_GE((b.end - b.begin) * sizeof(float), bytes);
    }
    if (bytes == 0 || bytes == (std::size_t(1) << 30)) EXPECT_EQ(plan.size(), 1u);
    if (bytes == 1) EXPECT_EQ(plan.size(), begins.size());
  }
}

TEST(Buckets, BucketedSumsEqualOneAllReduceBitwise) {
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  Model model(*be, parse_model_spec(kSpec), kDim, 4);
  const std::size_t n = model.num_params();
  // Rank-dependent values of mixed magnitude, where summation order matters.
  std::vector<float> mine(n);
  Rng rng(mix_seed(99, static_cast<std::uint64_t>(world_rank())));
  for (float& v : mine) v = static_cast<float>(rng.normal() * std::pow(10.0, rng.below(7) - 3.0));
  std::vector<float> one_shot = mine;
  comm->allreduce_sum(one_shot.data(), n);

  for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(256), std::size_t(2048)}) {
    std::vector<float> grads = mine;
    GradientBuckets buckets(*comm, grads.data(),
                            plan_buckets(model.param_layout(), n, bytes));
    for (int round = 0; round < 2; ++round) {  // state resets between steps
      std::memcpy(grads.data(), mine.data(), n * sizeof(float));
      buckets.begin_step();
      // As backward reports them: last layer first.
      const std::vector<std::size_t> begins = layer_begins(model.param_layout());
      for (std::size_t i = begins.size(); i-- > 0;) {
        buckets.grads_ready(begins[i]);
        buckets.between_layers();
      }
      buckets.finish();
      ASSERT_EQ(0, std::memcmp(grads.data(), one_shot.data(), n * sizeof(float)))
          << "bucket bytes " << bytes << ", round " << round;
      for (std::size_t b = 0; b < buckets.plan().size(); ++b)
        EXPECT_LE(buckets.started_at(b), buckets.done_at(b));
    }
  }
}

// Every element is added in rank order, ((g0 + g1) + g2) + ..., whatever
// the length (pieces of 0 or 1 elements, odd splits): checked against the
// sum computed locally from every rank's values.
TEST(MpiSums, AreAddedInRankOrderBitwise) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int ranks = comm->size();
  for (std::size_t n : {std::size_t(1), std::size_t(2), std::size_t(5), std::size_t(1001)}) {
    std::vector<float> mine(n);
    Rng rng(mix_seed(17, static_cast<std::uint64_t>(world_rank()), n));
    for (float& v : mine) v = static_cast<float>(rng.normal() * std::pow(10.0, rng.below(9) - 4.0));
    std::vector<float> all(n * static_cast<std::size_t>(ranks));
    MPI_Allgather(mine.data(), static_cast<int>(n), MPI_FLOAT, all.data(), static_cast<int>(n),
                  MPI_FLOAT, MPI_COMM_WORLD);
    std::vector<float> expect(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    for (int r = 1; r < ranks; ++r)
      for (std::size_t i = 0; i < n; ++i) expect[i] = expect[i] + all[static_cast<std::size_t>(r) * n + i];
    std::vector<float> blocking = mine, started = mine;
    comm->allreduce_sum(blocking.data(), n);
    comm->start_allreduce_sum(started.data(), n);
    comm->wait_all();
    EXPECT_EQ(0, std::memcmp(blocking.data(), expect.data(), n * sizeof(float))) << "n " << n;
    EXPECT_EQ(0, std::memcmp(started.data(), expect.data(), n * sizeof(float))) << "n " << n;
  }
}

// K steps of the full train_step, with and without buckets.
std::vector<float> train(std::size_t bucket_bytes, bool use_buckets) {
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int ranks = comm->size();
  const std::uint64_t batch = 23;
  Model model(*be, parse_model_spec(kSpec), kDim, max_shard_rows(batch, ranks));
  model.init(3);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdam;
  Optimizer opt(*be, oc, model.num_params());
  ShardBuffers shard(*be, max_shard_rows(batch, ranks), kDim, 1, LabelType::kClass);
  Scatter scatter(MPI_COMM_WORLD, kDim, 1, true);
  GradientBuckets buckets(*comm, model.grads(),
                          plan_buckets(model.param_layout(), model.num_params(), bucket_bytes));
  DeviceBuffer<float> stats(*be, 2);
  for (std::uint64_t s = 0; s < 4; ++s) {
    const std::uint64_t rows = s == 3 ? 2 : batch;  // a short batch: empty shards at P = 3, 4
    Batch b;
    b.slot.rows = b.rows = rows;
    Rng rng(mix_seed(5, s));
    b.features.resize(rows * kDim);
    for (float& x : b.features) x = static_cast<float>(rng.normal());
    b.labels.resize(rows);
    for (auto& y : b.labels) y = static_cast<std::int32_t>(rng.below(2));
    scatter.scatter(comm->rank() == 0 ? &b : nullptr, rows, shard.host());
    EXPECT_TRUE(train_step(*be, *comm, model, opt, LossKind::kXent, shard.to_device(), rows, 0.01f,
                           stats.get(), nullptr, use_buckets ? &buckets : nullptr));
  }
  return std::vector<float>(model.params(), model.params() + model.num_params());
}

TEST(Buckets, TrainingWithBucketsEqualsTrainingWithoutBitwise) {
  const std::vector<float> ref = train(0, false);
  for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(1024)}) {
    const std::vector<float> got = train(bytes, true);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)))
        << "bucket bytes " << bytes;
  }
}

// The pipelined input (scatter of t+1 started before t is used, progressed
// between layers) hands every rank exactly the shards the blocking path
// gives, in order, over a real queue on a fixture file; the previous shard
// stays intact while the next one lands. With uint8 features sent raw and
// converted on each rank, the shards are bitwise those of converting on
// rank 0 and sending floats.
void check_pipeline(bool uint8, ShuffleMode mode = ShuffleMode::kFull, bool stream = false) {
  auto be = make_backend("cpu", BackendOptions{});
  const int rank = world_rank();
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string file;
  if (rank == 0) {
    file = testing::scratch_dir("pipeline") + "/d.h5";
    testing::FixtureSpec spec;
    spec.rows = 37;  // batch 8: a short last batch of 5, shards of 0..3 rows
    spec.uint8 = uint8;
    testing::write_fixture(file, spec);
  }
  const std::uint64_t dim = 12, batch = 8;
  const BatchPlan plan(37, batch);
  const std::uint64_t steps = 2 * plan.steps_per_epoch() + 1;
  auto make_queue = [&](std::unique_ptr<Dataset>& data, bool raw) -> std::unique_ptr<InputQueue> {
    if (rank != 0) return nullptr;
    data = std::make_unique<Dataset>(file, "train");
    InputQueueConfig qc;
    qc.batch_size = batch;
    qc.shuffle.mode = mode;
    qc.shuffle.seed = 4;
    qc.shuffle.block_rows = 3;
    qc.shuffle.window_blocks = 2;
    qc.end_step = steps;
    qc.raw_features = raw;
    if (stream) qc.cache_bytes = 1;  // read from the file batch by batch
    return std::make_unique<InputQueue>(*data, qc);
  };
  const int max_rows = max_shard_rows(batch, ranks);

  std::vector<std::vector<float>> ref;
  std::vector<std::vector<std::int32_t>> ref_labels;
  {
    std::unique_ptr<Dataset> data;
    auto queue = make_queue(data, false);
    ShardBuffers buf(*be, max_rows, dim, 1, LabelType::kClass);
    Scatter scatter(MPI_COMM_WORLD, dim, 1, true);
    for (std::uint64_t s = 0; s < steps; ++s) {
      const Shard& sh = next_shard(queue.get(), scatter, plan.slot(s).rows, buf);
      ref.emplace_back(sh.features, sh.features + sh.rows * dim);
      ref_labels.emplace_back(sh.labels, sh.labels + sh.rows);
    }
  }

  std::unique_ptr<Dataset> data;
  auto queue = make_queue(data, uint8);
  InputPipeline input(MPI_COMM_WORLD, *be, queue.get(), max_rows, dim, 1, LabelType::kClass,
                      uint8 ? FeatureType::kUint8 : FeatureType::kFloat32);
  input.start(plan.slot(0).rows);
  for (std::uint64_t s = 0; s < steps; ++s) {
    Shard& sh = input.finish();
    const std::vector<float> copy(sh.features, sh.features + sh.rows * dim);
    if (s + 1 < steps) input.start(plan.slot(s + 1).rows);
    for (int k = 0; k < 3; ++k) input.between_layers();
    ASSERT_EQ(copy, ref[s]) << "step " << s;
    // The shard in use must not change while the next one arrives.
    EXPECT_EQ(std::vector<float>(sh.features, sh.features + sh.rows * dim), ref[s]) << "step " << s;
    EXPECT_EQ(std::vector<std::int32_t>(sh.labels, sh.labels + sh.rows), ref_labels[s]);
  }
  EXPECT_FALSE(input.started());
}

TEST(InputPipeline, DeliversTheBlockingPathsShardsInOrder) { check_pipeline(false); }
TEST(InputPipeline, RawUint8ShardsEqualConvertedOnes) {
  check_pipeline(true);
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kFull, ShuffleMode::kBlock})
    check_pipeline(true, mode, /*stream=*/true);
}

}  // namespace
}  // namespace dptrain
