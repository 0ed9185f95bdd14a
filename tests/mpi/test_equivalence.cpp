// The core invariant: K steps on P ranks with the same global batches give the
// same weights as one rank holding every batch whole — with uneven shards
// (B not divisible by 3 or 4), a short last batch, and B < P (empty shards).
// Every rank also checks that all towers are bitwise identical.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/optimizer.hpp"
#include "train/train_step.hpp"

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
  b.slot.rows = b.rows = rows;
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

constexpr const char* kSpec = "dense:9,tanh,dense:5,relu,dense:3";
constexpr float kLr = 0.05f;
constexpr float kMomentum = 0.9f;

OptimizerConfig optimizer_config(const Case& c) {
  OptimizerConfig oc;
  oc.kind = c.optimizer;
  oc.momentum = kMomentum;
  oc.weight_decay = 0.01f;
  return oc;
}

// What the one-rank reference records at every step, for the tolerance:
// its reduced gradient g and S = sum over the batch's samples of |each
// sample's contribution to g| (the scale of the rounding error of the sum).
struct StepRecord {
  std::vector<float> grad, abs_sum;
};

struct TrainRun {
  std::vector<float> params;
  std::vector<StepRecord> steps;  // recorded when asked
};

TrainRun train(const Case& c, MPI_Comm comm_handle, bool record) {
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = make_mpi_communicator(comm_handle);
  const int ranks = comm->size();
  const std::uint64_t max_batch = *std::max_element(c.batches.begin(), c.batches.end());
  const int max_rows = max_shard_rows(max_batch, ranks);
  Model model(*be, parse_model_spec(kSpec), kDim, max_rows);
  model.init(7);
  const std::size_t n = model.num_params();
  Optimizer opt(*be, optimizer_config(c), n);
  ShardBuffers shard(*be, max_rows, kDim, kOut, label_type(c.loss));
  const std::uint64_t label_width = c.loss == LossKind::kXent ? 1 : kOut;
  Scatter scatter(comm_handle, kDim, label_width, c.loss == LossKind::kXent);
  DeviceBuffer<float> stats(*be, 2);
  TrainRun run;
  for (std::uint64_t s = 0; s < c.batches.size(); ++s) {
    const Batch b = make_batch(s, c.batches[s], c.loss);
    if (record) {
      // Each sample's gradient share at the current weights: a one-row step
      // scaled by 1/B at lr 0 (plain SGD: leaves the weights as they are).
      StepRecord rec{{}, std::vector<float>(n, 0.0f)};
      Optimizer probe(*be, OptimizerConfig{OptimizerKind::kSgd}, n);
      for (std::uint64_t r = 0; r < b.slot.rows; ++r) {
        Batch one;
        one.slot.rows = one.rows = 1;
        one.features.assign(b.features.begin() + r * kDim, b.features.begin() + (r + 1) * kDim);
        if (c.loss == LossKind::kXent) one.labels = {b.labels[r]};
        else one.targets.assign(b.targets.begin() + r * kOut, b.targets.begin() + (r + 1) * kOut);
        scatter.scatter(&one, 1, shard.host());
        EXPECT_TRUE(train_step(*be, *comm, model, probe, c.loss, shard.to_device(), b.slot.rows,
                               0.0f, stats.get(), nullptr));
        for (std::size_t i = 0; i < n; ++i) rec.abs_sum[i] += std::abs(model.grads()[i]);
      }
      run.steps.push_back(std::move(rec));
    }
    scatter.scatter(comm->rank() == 0 ? &b : nullptr, b.slot.rows, shard.host());
    EXPECT_TRUE(train_step(*be, *comm, model, opt, c.loss, shard.to_device(), b.slot.rows, kLr,
                           stats.get(), nullptr));
    if (record) run.steps.back().grad.assign(model.grads(), model.grads() + n);
  }
  run.params.assign(model.params(), model.params() + n);
  return run;
}

// The most a parameter may differ after the steps, from the arithmetic alone.
//
// Both runs add the same per-sample terms, in different orders (one GEMM over
// B rows vs P partial GEMMs, then P partial sums in rank order), and their
// forward passes may block their dot products differently (BLAS kernels do).
// A float sum of n terms is within gamma_n * S of the exact sum, gamma_n =
// n u / (1 - n u), u = 2^-24, S = sum of |terms|; two orders differ by twice
// that. Here n = rows + ranks, plus the widest dot product (fan-in 9) for the
// forward rounding feeding each term: dg <= 2 (gamma_n + gamma_9) S.
//
// That error reaches the weights through the optimizer:
//  - SGD: lr * dg now, and through the velocity at later steps: at most
//    lr * dg / (1 - momentum) in all.
//  - Adam: the update lr * mhat / (sqrt(vhat) + eps) normalizes by |g|, so a
//    gradient error is amplified by 1/|g|: at step t, vhat >= g^2 / t, and the
//    update moves by at most lr * 2 sqrt(t) dg / |g|. A gradient no larger
//    than its own rounding error (a cancelling sum) can flip the update's
//    sign: an element may then differ by Adam's whole step, 2 lr sqrt(t),
//    which caps the bound. Such elements are counted, not trusted.
// Weights that already differ change the next gradients a little; the
// factor 2 covers that over these few steps of a tiny network.
struct Tolerance {
  std::vector<double> per_param;
  std::size_t capped = 0;  // elements whose bound is Adam's whole step
};

Tolerance tolerance(const Case& c, const TrainRun& ref, int ranks) {
  constexpr double u = 0x1p-24;
  auto gamma = [&](double terms) { return terms * u / (1 - terms * u); };
  const std::size_t n = ref.params.size();
  Tolerance tol{std::vector<double>(n, 0.0)};
  std::vector<bool> capped(n, false);
  for (std::size_t s = 0; s < ref.steps.size(); ++s) {
    const double terms = static_cast<double>(c.batches[s]) + ranks;
    const double rounding = 2 * (gamma(terms) + gamma(9));
    const double t = static_cast<double>(s + 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double dg = rounding * ref.steps[s].abs_sum[i];
      double bound = 0;
      if (c.optimizer == OptimizerKind::kSgd) {
        bound = kLr * dg / (1 - kMomentum);
      } else {
        const double whole_step = 2 * kLr * std::sqrt(t);
        const double g = std::abs(ref.steps[s].grad[i]);
        bound = g > 0 ? std::min(whole_step, kLr * 2 * std::sqrt(t) * dg / g) : (dg > 0 ? whole_step : 0);
        if (bound == whole_step) capped[i] = true;
      }
      tol.per_param[i] += 2 * bound;
    }
  }
  tol.capped = static_cast<std::size_t>(std::count(capped.begin(), capped.end(), true));
  return tol;
}

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, MatchesOneRankAndTowersAgree) {
  const Case& c = GetParam();
  const TrainRun dist = train(c, MPI_COMM_WORLD, false);
  const TrainRun ref = train(c, MPI_COMM_SELF, true);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  ASSERT_EQ(dist.params.size(), ref.params.size());
  const Tolerance tol = tolerance(c, ref, ranks);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    const double d = std::abs(double(dist.params[i]) - ref.params[i]);
    if (d > tol.per_param[i] && bad++ < 5)
      ADD_FAILURE() << c.name << ": parameter " << i << " differs by " << d << " > " << tol.per_param[i];
  }
  EXPECT_EQ(bad, 0u) << c.name;
  // The bound must check most of the model: Adam's tiny-gradient cap may
  // excuse a few elements, not the many a missed rank would disturb.
  EXPECT_LE(tol.capped * 10, ref.params.size()) << c.name << ": " << tol.capped << " capped";

  // Towers identical: min and max over ranks of every parameter coincide.
  const std::size_t n = dist.params.size();
  std::vector<float> lo(n), hi(n);
  MPI_Allreduce(dist.params.data(), lo.data(), static_cast<int>(n), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(dist.params.data(), hi.data(), static_cast<int>(n), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "towers drifted apart";

  // Training moved the weights (a no-op step would pass the comparisons),
  // and by far more than the tolerance.
  auto be = make_backend("cpu", BackendOptions{});
  Model fresh(*be, parse_model_spec(kSpec), kDim, 1);
  fresh.init(7);
  double moved = 0, widest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    moved = std::max(moved, std::abs(double(ref.params[i]) - fresh.params()[i]));
    widest = std::max(widest, tol.per_param[i]);
  }
  EXPECT_GT(moved, 1e-3);
  if (c.optimizer == OptimizerKind::kSgd) EXPECT_GT(moved, 100 * widest) << c.name;
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
