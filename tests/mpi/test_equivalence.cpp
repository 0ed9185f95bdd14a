// The core invariant: K steps on P ranks with the same global batches give the
// same weights as one rank holding every batch whole — with uneven shards
// (B not divisible by 3 or 4), a short last batch, and B < P (empty shards).
// Every rank also checks that all towers are bitwise identical.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dptrain/comm.hpp"
#include "dptrain/optimizer.hpp"
#include "dptrain/random.hpp"
#include "runtime.hpp"

namespace dptrain {
namespace {

struct Case {
  const char* name;
  OptimizerKind optimizer;
  LossKind loss;
  std::vector<std::uint64_t> batches;  // global rows of each step
};

constexpr int kDim = 7;
constexpr int kOut = 3;

// The global batch of a step, the same on every rank (only rank 0's copy is
// scattered; the reference uses its own).
Batch make_batch(std::uint64_t step, std::uint64_t rows, LossKind loss) {
  Batch b;
  b.slot.step = step;
  b.slot.rows = rows;
  Rng rng(mix_seed(42, step));
  b.features.resize(rows * kDim);
  for (float& x : b.features) x = static_cast<float>(rng.normal());
  if (loss == LossKind::kXent) {
    b.labels.resize(rows);
    for (auto& y : b.labels) y = static_cast<std::int32_t>(rng.below(kOut));
  } else {
    b.targets.resize(rows * kOut);
    for (float& t : b.targets) t = static_cast<float>(rng.normal());
  }
  return b;
}

std::vector<float> train(const Case& c, MPI_Comm comm_handle) {
  auto be = make_backend(DeviceKind::kCpu, BackendOptions{});
  auto comm = make_mpi_communicator(comm_handle);
  const int ranks = comm->size();
  const std::uint64_t max_batch = *std::max_element(c.batches.begin(), c.batches.end());
  const int max_rows = max_shard_rows(max_batch, ranks);
  Model model(*be, parse_model_spec("dense:9,tanh,dense:5,relu,dense:3"), kDim, max_rows);
  model.init(7);
  OptimizerConfig oc;
  oc.kind = c.optimizer;
  oc.momentum = 0.9f;
  oc.weight_decay = 0.01f;
  Optimizer opt(*be, oc, model.num_params());
  ShardBuffers shard(*be, max_rows, kDim, kOut, c.loss);
  Scatter scatter(comm_handle, kDim, c.loss == LossKind::kXent ? 1 : kOut,
                  c.loss == LossKind::kXent);
  DeviceBuffer<float> stats(*be, 2);
  for (std::uint64_t s = 0; s < c.batches.size(); ++s) {
    const Batch b = make_batch(s, c.batches[s], c.loss);
    scatter.scatter(comm->rank() == 0 ? &b : nullptr, b.slot.rows, shard.host());
    EXPECT_TRUE(train_step(*be, *comm, model, opt, c.loss, shard.to_device(), b.slot.rows, 0.05f,
                           stats.get(), nullptr));
  }
  return std::vector<float>(model.params(), model.params() + model.num_params());
}

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, MatchesOneRankAndTowersAgree) {
  const Case& c = GetParam();
  const std::vector<float> dist = train(c, MPI_COMM_WORLD);
  const std::vector<float> ref = train(c, MPI_COMM_SELF);
  ASSERT_EQ(dist.size(), ref.size());
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(double(dist[i]) - ref[i]) / (1e-3 + std::abs(double(ref[i])));
    worst = std::max(worst, d);
  }
  EXPECT_LT(worst, 2e-5) << c.name;

  // Towers identical: min and max over ranks of every parameter coincide.
  std::vector<float> lo(dist.size()), hi(dist.size());
  MPI_Allreduce(dist.data(), lo.data(), static_cast<int>(dist.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(dist.data(), hi.data(), static_cast<int>(dist.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "towers drifted apart";

  // Training moved the weights (a no-op step would pass the comparisons).
  auto be = make_backend(DeviceKind::kCpu, BackendOptions{});
  Model fresh(*be, parse_model_spec("dense:9,tanh,dense:5,relu,dense:3"), kDim, 1);
  fresh.init(7);
  double moved = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::abs(double(ref[i]) - fresh.params()[i]));
  EXPECT_GT(moved, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, Equivalence,
    ::testing::Values(
        Case{"sgd_xent", OptimizerKind::kSgd, LossKind::kXent, {26, 26, 18, 26, 5}},
        Case{"adam_xent", OptimizerKind::kAdam, LossKind::kXent, {26, 26, 18, 26, 5}},
        Case{"adamw_mse", OptimizerKind::kAdamW, LossKind::kMse, {26, 13, 26, 7}},
        Case{"sgd_small_batches", OptimizerKind::kSgd, LossKind::kXent, {2, 1, 3, 2}},
        Case{"adam_small_batches", OptimizerKind::kAdam, LossKind::kMse, {1, 2, 3}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dptrain
