// The MPI communicator's reduce-scatter and all-gather (--shard-optimizer):
// each rank's piece of a reduce-scatter equals, bit for bit, the same
// elements of an all-reduce of the same buffers (both add in rank order),
// for uneven pieces, empty ones and a buffer smaller than the rank count,
// through buckets started one after another; the all-gather puts every
// rank's piece everywhere. On any rank count 1..4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/optimizer.hpp"

namespace dptrain {
namespace {

int world(int* size) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return r;
}

// Rank-dependent values of mixed magnitude, where summation order matters.
std::vector<float> values(std::size_t n, int rank) {
  std::vector<float> v(n);
  Rng rng(mix_seed(7, static_cast<std::uint64_t>(rank)));
  for (float& x : v) x = static_cast<float>(rng.normal() * std::pow(10.0, rng.below(7) - 3.0));
  return v;
}

// Elements of [lo, hi) where a and b differ in their bits (no early exit
// from a test: the other ranks would wait in its next collective).
std::size_t mismatches(const std::vector<float>& a, const std::vector<float>& b, std::size_t lo,
                       std::size_t hi) {
  std::size_t bad = 0;
  for (std::size_t i = lo; i < hi; ++i) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

// Cuts of n for `size` ranks: balanced, all at the front (the last pieces
// empty), and one rank with everything.
std::vector<std::vector<std::size_t>> cuts(std::size_t n, int size) {
  std::vector<std::vector<std::size_t>> out = {slice_bounds(n, size)};
  std::vector<std::size_t> front(static_cast<std::size_t>(size) + 1, n);
  front[0] = 0;
  if (size > 1) front[1] = n / 3;
  out.push_back(front);
  std::vector<std::size_t> last(static_cast<std::size_t>(size) + 1, 0);
  last.back() = n;
  out.push_back(last);
  return out;
}

TEST(ReduceScatter, PiecesEqualTheAllReduceBitwise) {
  int size = 1;
  const int rank = world(&size);
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(173), std::size_t(5000)}) {
    const std::vector<float> mine = values(n, rank);
    std::vector<float> summed = mine;
    comm->allreduce_sum(summed.data(), n);
    for (const auto& bounds : cuts(n, size)) {
      std::vector<float> buf = mine;
      comm->start_reduce_scatter_sum(buf.data(), bounds.data());
      comm->wait_all();
      EXPECT_EQ(mismatches(buf, summed, bounds[rank], bounds[rank + 1]), 0u) << "n " << n;
    }
  }
}

// Two buckets (the arena's second half first, as backward reports them),
// each with the arena's bounds cut to it, then an all-gather: every rank
// ends with the all-reduced arena.
TEST(ReduceScatter, BucketsThenAllGatherGiveTheAllReduce) {
  int size = 1;
  const int rank = world(&size);
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const std::size_t n = 1001, split = 420;
  const std::vector<float> mine = values(n, rank);
  std::vector<float> summed = mine;
  comm->allreduce_sum(summed.data(), n);
  const std::vector<std::size_t> bounds = slice_bounds(n, size);
  auto cut = [&](std::size_t begin, std::size_t end) {
    std::vector<std::size_t> c;
    for (std::size_t b : bounds) c.push_back(std::min(std::max(b, begin), end) - begin);
    return c;
  };
  const std::vector<std::size_t> high = cut(split, n), low = cut(0, split);
  std::vector<float> buf = mine;
  comm->start_reduce_scatter_sum(buf.data() + split, high.data());
  comm->progress();
  comm->start_reduce_scatter_sum(buf.data(), low.data());
  comm->wait_all();
  EXPECT_EQ(mismatches(buf, summed, bounds[rank], bounds[rank + 1]), 0u);
  comm->allgather(buf.data(), bounds.data());
  EXPECT_EQ(mismatches(buf, summed, 0, n), 0u);
}

TEST(AllGather, EveryRankGetsEveryPiece) {
  int size = 1;
  const int rank = world(&size);
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  for (std::size_t n : {std::size_t(2), std::size_t(77)}) {
    for (const auto& bounds : cuts(n, size)) {
      std::vector<float> buf(n, -1.0f);
      for (std::size_t i = bounds[rank]; i < bounds[rank + 1]; ++i)
        buf[i] = static_cast<float>(rank * 1000 + static_cast<int>(i));
      comm->allgather(buf.data(), bounds.data());
      std::vector<float> want(n);
      for (int r = 0; r < size; ++r)
        for (std::size_t i = bounds[r]; i < bounds[r + 1]; ++i)
          want[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
      EXPECT_EQ(mismatches(buf, want, 0, n), 0u) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace dptrain
