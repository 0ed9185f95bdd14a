// Implements: the rank-count invariance of `bn` (docs/design.md section 1): on P
// ranks (ctest runs 1..4) with a global batch split unevenly as the trainer
// splits it — 7 rows, and 2 rows, which leaves ranks 2 and 3 empty — a bn
// layer gives every rank's rows the outputs and input gradients, the summed
// weight and bias gradients and the running statistics of one rank holding
// the whole batch, within float rounding, with exactly one replica sum per
// pass; and through a Model, empty shards included. `bn:local` makes no
// collective and equals the layer on the shard alone. Every rank checks
// its own rows (nothing is gathered); the main all-reduces the failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bn_reference.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/model/model.hpp"
#include "layer_rig.hpp"

namespace dptrain {
namespace {

using testing::LayerRig;
using testing::normal_values;
using testing::to_floats;

// The replica sum the trainer makes from its communicator, here straight on
// MPI_COMM_WORLD (the CPU backend's memory is host memory).
class WorldSum final : public ReplicaSum {
 public:
  void sum(float* data, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ++calls;
  }
  int calls = 0;
};

struct World {
  int rank = 0, ranks = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  // As the trainer splits: the first rows % ranks ranks hold one row more.
  int first_row(int rows) const { return rank * (rows / ranks) + std::min(rank, rows % ranks); }
  int shard_rows(int rows) const { return rows / ranks + (rank < rows % ranks ? 1 : 0); }
};

std::vector<float> rows_of(const std::vector<float>& v, std::size_t width, int first, int rows) {
  return std::vector<float>(v.begin() + first * width, v.begin() + (first + rows) * width);
}

std::vector<float> world_sum(std::vector<float> v) {
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// The two runs differ only in how each per-channel sum is split: P partial
// sums rounded to float (each within u = 2^-24 of its value) and added in
// P - 1 float additions, against one rounding. That moves the sums by at
// most 2 P u of the sums of magnitudes; the normalized values inherit it
// times the sums' condition (1 + |mean - shift| / std)², below 4 for this
// data, and the backward the same again: 64 P u of the largest value covers
// it with margin, and stays far below what one wrong term would cost.
double bound(int ranks) { return 64.0 * ranks * 0x1p-24; }

struct Figures {
  double worst = 0;
  void add(double ratio) { worst = std::max(worst, ratio); }
};

// abs: a floor for values that are differences of larger terms (below).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const char* what, Figures& f, double abs = 1e-30) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const std::vector<double> w(want.begin(), want.end());
  const double r = w.empty() ? 0.0 : testing::error_ratio(got.data(), w, rel, abs);
  f.add(r);
  EXPECT_LT(r, 1.0) << what;
}

void check_layer(const char* token, const Shape& sample, int batch, const World& world) {
  SCOPED_TRACE(std::string(token) + " " + sample.to_string() + " batch " + std::to_string(batch));
  auto be = make_backend("cpu", BackendOptions{});
  const std::size_t width = sample.size();
  const int first = world.first_row(batch), rows = world.shard_rows(batch);
  LayerRig whole(*be, token, sample, batch), part(*be, token, sample, batch);
  whole.set_params(to_floats(normal_values(whole.params.size(), 3, 0.5, 0.5)));  // weight, bias
  part.set_params(whole.params);
  WorldSum sum;
  part.step = {1, 0, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(batch), &sum};
  const bool global = std::string(token) == "bn";
  Figures f;
  for (int step = 0; step < 3; ++step) {
    const auto x = to_floats(normal_values(batch * width, 10 + step, 1.5 - step, 2.0));
    const auto dy = to_floats(normal_values(batch * width, 20 + step, 0.0, 1.0));
    const auto y_ref = whole.forward(x, batch);
    const auto dx_ref = whole.backward(x, y_ref, dy, batch);
    const auto xs = rows_of(x, width, first, rows);
    const auto y = part.forward(xs, rows);
    const auto dx = part.backward(xs, y, rows_of(dy, width, first, rows), rows);
    EXPECT_EQ(sum.calls, global ? 2 * (step + 1) : 0) << "one replica sum per pass";
    if (!global) {  // the shard's own statistics: the layer on the shard alone
      LayerRig alone(*be, token, sample, std::max(rows, 1));
      alone.set_params(part.params);
      const auto y1 = alone.forward(xs, rows);
      EXPECT_EQ(y, y1);
      EXPECT_EQ(dx, alone.backward(xs, y1, rows_of(dy, width, first, rows), rows));
      return;
    }
    expect_close(y, rows_of(y_ref, width, first, rows), bound(world.ranks), "outputs", f);
    // dx = w·invstd·(dy - mean dy - x̂ · mean dy·x̂) cancels to nearly 0
    // when a channel has few values (exactly, up to eps, with 2): its error
    // scales with the terms w·invstd·dy, not with dx.
    const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
    const auto ref = testing::bn_reference(xd, batch, sample[0], static_cast<int>(width) / sample[0],
                                           std::vector<double>(whole.params.begin(), whole.params.begin() + sample[0]),
                                           std::vector<double>(sample[0], 0.0), dyd, 1e-5);
    double terms = 0;
    for (std::size_t i = 0; i < dyd.size(); ++i) {
      const std::size_t c = i / (width / sample[0]) % sample[0];
      terms = std::max(terms, std::abs(dyd[i] * whole.params[c] / std::sqrt(ref.var[c] + 1e-5)));
    }
    expect_close(dx, rows_of(dx_ref, width, first, rows), bound(world.ranks), "input gradients", f,
                 bound(world.ranks) * terms);
    expect_close(world_sum(part.grads), whole.grads, bound(world.ranks), "weight and bias gradients", f);
    expect_close(part.buffers, whole.buffers, bound(world.ranks), "running statistics", f);
    // Identical on every rank, bit for bit: min and max over ranks agree.
    std::vector<float> lo(part.buffers.size()), hi(part.buffers.size());
    MPI_Allreduce(part.buffers.data(), lo.data(), static_cast<int>(lo.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(part.buffers.data(), hi.data(), static_cast<int>(hi.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << "running statistics differ between ranks";
  }
  double worst = f.worst;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world.rank == 0)
    std::printf("bn %s batch %d on %d ranks: worst error/bound %.4f (bound %.2e relative)\n",
                sample.to_string().c_str(), batch, world.ranks, worst, bound(world.ranks));
}

TEST(BatchNormRanks, LayerMatchesOneRankOnUnevenAndEmptyShards) {
  const World world;
  for (const Shape& sample : {Shape{3, 4, 5}, Shape{6}, Shape{2, 3, 2, 3}})
    for (int batch : {7, 2}) {
      check_layer("bn", sample, batch, world);
      check_layer("bn:local", sample, batch, world);
    }
}

// Through the Model: its empty-shard path (forward_empty, backward_empty)
// and backward_input after the first trained layer.
TEST(BatchNormRanks, ModelMatchesOneRank) {
  const World world;
  auto be = make_backend("cpu", BackendOptions{});
  const char* spec = "dense:5,bn,tanh,dense:4,bn,dense:3";
  // 3 rows leave rank 3 of 4 empty; fewer would make this flat bn's input
  // gradient a cancellation (see check_layer) that the relative bound on
  // the first layer's gradients cannot follow.
  for (int batch : {7, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const int first = world.first_row(batch), rows = world.shard_rows(batch);
    Model whole(*be, parse_model_spec(spec), 4, batch), part(*be, parse_model_spec(spec), 4, batch);
    whole.init(9);
    part.init(9);
    WorldSum sum;
    part.set_step({1, 0, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(batch), &sum});
    Figures f;
    for (int step = 0; step < 3; ++step) {
      const auto x = to_floats(normal_values(batch * 4, 30 + step, 0.5, 1.0));
      const auto dout = to_floats(normal_values(batch * 3, 40 + step, 0.0, 0.3));
      whole.forward(x.data(), batch);
      std::copy(dout.begin(), dout.end(), whole.output_grad());
      whole.backward(x.data(), whole.output_grad(), batch);
      const auto xs = rows_of(x, 4, first, rows);
      part.forward(xs.data(), rows);
      const auto ds = rows_of(dout, 3, first, rows);
      std::copy(ds.begin(), ds.end(), part.output_grad());
      part.backward(xs.data(), part.output_grad(), rows);
      EXPECT_EQ(sum.calls, 4 * (step + 1));
      const std::vector<float> g(part.grads(), part.grads() + part.num_params());
      const std::vector<float> g_ref(whole.grads(), whole.grads() + whole.num_params());
      expect_close(world_sum(g), g_ref, bound(world.ranks), "gradients", f);
      const std::vector<float> b(part.buffers(), part.buffers() + part.num_buffers());
      const std::vector<float> b_ref(whole.buffers(), whole.buffers() + whole.num_buffers());
      expect_close(b, b_ref, bound(world.ranks), "running statistics", f);
    }
    double worst = f.worst;
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (world.rank == 0)
      std::printf("model %s batch %d on %d ranks: worst error/bound %.4f\n", spec, batch,
                  world.ranks, worst);
  }
}

}  // namespace
}  // namespace dptrain
