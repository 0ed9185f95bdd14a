// Implements: the NCCL communicator's calls over pieces (nccl_pieces.cpp):
// the sliced state's reduce-scatter and allgather over uneven and empty
// pieces, bit for bit against the MPI communicator, through both paths (one
// ncclReduceScatter / ncclAllGather over near-equal pieces, else a group of
// rooted calls); on the emulation each call is also checked to have taken
// the path the rule gives. Checked the way test_nccl.cpp checks: every rank
// counts its wrong elements, and the count is all-reduced.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/common/test_hooks.hpp"
#include "gpu_env.hpp"
#include "nccl_fixture.hpp"
#if defined(DPTRAIN_EMULATED_DEVICE)
#include <nccl.h>  // the emulation's, with dptrain_emu::nccl_calls
#endif

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using gpu_test::DeviceBusy;
using gpu_test::download;
using gpu_test::env;
using gpu_test::Nccl;
using gpu_test::upload;
using gpu_test::value;

// Piece bounds of n values over `size` ranks, piece r sized in proportion
// to weights[r] (0: an empty piece, two equal offsets).
std::vector<std::size_t> bounds_from(std::size_t n, const std::vector<std::size_t>& weights) {
  const std::size_t total = std::accumulate(weights.begin(), weights.end(), std::size_t{0});
  std::vector<std::size_t> b{0};
  std::size_t sum = 0;
  for (std::size_t w : weights) b.push_back(n * (sum += w) / total);
  return b;
}

// Every way of cutting n values the tests try: near-even (n is no multiple
// of the rank count, or smaller than it), the first piece 1/8 larger than
// the others, the first, a middle and the last piece empty, lopsided (each
// piece twice the next), and as slice_bounds cuts the optimizer state (the
// first n % size pieces one longer).
std::vector<std::vector<std::size_t>> cuts(std::size_t n, int size) {
  std::vector<std::vector<std::size_t>> shapes;
  std::vector<std::size_t> w(size, 1);
  shapes.push_back(w);
  w.assign(size, 8);
  w[0] = 9;
  shapes.push_back(w);
  for (int empty : {0, size / 2, size - 1}) {
    w.assign(size, 1);
    w[empty] = 0;
    if (size > 1) shapes.push_back(w);
  }
  for (int r = 0; r < size; ++r) w[r] = std::size_t{1} << (size - 1 - r);
  shapes.push_back(w);
  std::vector<std::vector<std::size_t>> out;
  for (const auto& weights : shapes) out.push_back(bounds_from(n, weights));
  const auto p = static_cast<std::size_t>(size);
  std::vector<std::size_t> sliced{0};
  for (std::size_t r = 0; r < p; ++r) sliced.push_back(sliced.back() + n / p + (r < n % p));
  out.push_back(sliced);
  return out;
}

// The communicator's rule (equal_pieces_pay in nccl_pieces.cpp), restated:
// one equal-piece collective when there are several pieces, none empty, and
// padding them to the largest adds at most n/8.
bool takes_equal_pieces(const std::vector<std::size_t>& bounds) {
  const std::size_t parts = bounds.size() - 1, n = bounds.back();
  std::size_t largest = 0;
  for (std::size_t r = 0; r < parts; ++r) {
    if (bounds[r + 1] == bounds[r]) return false;
    largest = std::max(largest, bounds[r + 1] - bounds[r]);
  }
  return parts > 1 && parts * largest <= n + n / 8;
}

// The equal-piece collectives a flat call issues: one per window of the
// largest piece, the window as nccl_pieces.cpp sizes it (its staging buffer of
// 16 Mi floats, or DPTRAIN_TEST_NCCL_STAGING_FLOATS, over the P slots).
std::size_t windows(const std::vector<std::size_t>& bounds) {
  const std::size_t parts = bounds.size() - 1;
  std::size_t largest = 0;
  for (std::size_t r = 0; r < parts; ++r) largest = std::max(largest, bounds[r + 1] - bounds[r]);
  const std::size_t most = dptrain::test_hooks::nccl_staging_floats(std::size_t(16) << 20);
  const std::size_t w = std::min(largest, std::max<std::size_t>(1, most / parts));
  return (largest + w - 1) / w;
}

std::size_t non_empty_pieces(const std::vector<std::size_t>& bounds) {
  std::size_t k = 0;
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) k += bounds[r + 1] > bounds[r];
  return k;
}

// The collectives one call issued, from the emulation's counts
// (dptrain_emu::nccl_calls): one `equal` call per window on the flat path, else one
// `rooted` call per non-empty piece. Checks nothing on a GPU.
class PathCheck {
 public:
#if defined(DPTRAIN_EMULATED_DEVICE)
  using Call = dptrain_emu::NcclCall;
  PathCheck(Call equal, Call rooted)
      : equal_(equal), rooted_(rooted), equal_before_(dptrain_emu::nccl_calls(equal)),
        rooted_before_(dptrain_emu::nccl_calls(rooted)) {}
  // Whether the call took the flat path; a failure names the case.
  bool expect(const std::vector<std::size_t>& bounds, const std::string& what) const {
    const bool flat = takes_equal_pieces(bounds);
    const std::size_t equal = dptrain_emu::nccl_calls(equal_) - equal_before_;
    const std::size_t rooted = dptrain_emu::nccl_calls(rooted_) - rooted_before_;
    EXPECT_EQ(equal, flat ? windows(bounds) : 0u) << "equal-piece collectives: " << what;
    EXPECT_EQ(rooted, flat ? 0u : non_empty_pieces(bounds)) << "rooted collectives: " << what;
    return flat;
  }

 private:
  Call equal_, rooted_;
  std::size_t equal_before_, rooted_before_;
#else
  enum class Call { kReduceScatter, kReduce, kAllGather, kBroadcast };
  PathCheck(Call, Call) {}
  bool expect(const std::vector<std::size_t>& bounds, const std::string&) const {
    return takes_equal_pieces(bounds);
  }
#endif
};

// Both paths were taken over the cases of a test (with more than one rank:
// on one, every call is a single rooted one).
void expect_both_paths(int flat, int grouped) {
  if (env().size == 1) return;
  EXPECT_GT(flat, 0) << "no case took the equal-piece path";
  EXPECT_GT(grouped, 0) << "no case took the grouped path";
}

const std::size_t kSizes[] = {1, 3, 7, 1001, 262147};

std::string describe(const std::vector<std::size_t>& bounds) {
  std::string s;
  for (std::size_t b : bounds) s += (s.empty() ? "" : ",") + std::to_string(b);
  return "bounds {" + s + "}";
}

float sum_over_ranks(std::size_t i) {
  float want = 0.0f;
  for (int r = 0; r < env().size; ++r) want += value(r, i);
  return want;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// `host` on the device (buf), written there by the compute stream behind
// ~10 ms of queued work (on a GPU) and with no host wait after it: a
// collective that does not wait for the compute stream reads stale data, on
// the emulation the NaNs of new device memory.
struct Staged {
  DeviceBuffer<float> source, buf;
};
Staged written_by_compute(Backend& gpu, DeviceBusy& busy, const std::vector<float>& host) {
  Staged s{upload(gpu, host), DeviceBuffer<float>(gpu, host.size())};
  busy.queue(10.0);
  gpu.copy_device(s.buf.get(), s.source.get(), host.size() * sizeof(float));
  return s;
}

// Each rank's own piece holds the sum over the ranks, bit for bit what the
// MPI communicator sums on host copies of the same data. The data is
// written by the compute stream and only wait_all orders the download after
// the sum, so a sum that does not wait for the compute stream, or that the
// compute stream never waits for, shows too.
TEST_F(Nccl, ReduceScatterSum) {
  const int rank = env().rank;
  DeviceBusy busy(*gpu_);
  int flat = 0, grouped = 0;
  for (std::size_t n : kSizes)
    for (const auto& bounds : cuts(n, env().size)) {
      std::vector<float> in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = value(rank, i);
      auto [source, buf] = written_by_compute(*gpu_, busy, in);
      const PathCheck path(PathCheck::Call::kReduceScatter, PathCheck::Call::kReduce);
      EXPECT_EQ(comm_->start_reduce_scatter_sum(buf.get(), bounds.data()), 0);
      if (path.expect(bounds, "n=" + std::to_string(n) + ", " + describe(bounds)))
        ++flat;
      else
        ++grouped;
      comm_->wait_all();
      const auto out = download(*gpu_, buf);
      std::vector<float> host = in;
      mpi_->start_reduce_scatter_sum(host.data(), bounds.data());
      mpi_->wait_all();
      std::int64_t wrong = 0, unlike_mpi = 0;
      for (std::size_t i = bounds[rank]; i < bounds[rank + 1]; ++i) {
        wrong += out[i] != sum_over_ranks(i);
        unlike_mpi += !same_bits(out[i], host[i]);
      }
      EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "n=" << n << ", " << describe(bounds);
      EXPECT_EQ(wrong_on_any_rank(unlike_mpi), 0)
          << "differs from the MPI communicator: n=" << n << ", " << describe(bounds);
    }
  expect_both_paths(flat, grouped);
  const std::vector<std::size_t> nothing(env().size + 1, 0);
  EXPECT_EQ(comm_->start_reduce_scatter_sum(nullptr, nothing.data()), 0);  // nothing to fail
  comm_->wait_all();
}

// Every rank ends with piece r of rank r's buffer, for every r, as the MPI
// communicator's allgather gives on host copies; ordered both ways with the
// compute stream as ReduceScatterSum. The buffer goes on past the pieces,
// and that tail is left as it was: an allgather writes the pieces only.
TEST_F(Nccl, Allgather) {
  const int rank = env().rank;
  const std::size_t tail = 5;
  const float untouched = -0.5f;
  DeviceBusy busy(*gpu_);
  int flat = 0, grouped = 0;
  for (std::size_t n : kSizes)
    for (const auto& bounds : cuts(n, env().size)) {
      std::vector<float> in(n + tail, untouched);
      for (std::size_t i = 0; i < n; ++i) in[i] = value(rank, i);
      auto [source, buf] = written_by_compute(*gpu_, busy, in);
      const PathCheck path(PathCheck::Call::kAllGather, PathCheck::Call::kBroadcast);
      comm_->allgather(buf.get(), bounds.data());
      if (path.expect(bounds, "n=" + std::to_string(n) + ", " + describe(bounds)))
        ++flat;
      else
        ++grouped;
      const auto out = download(*gpu_, buf);
      std::vector<float> host = in;
      mpi_->allgather(host.data(), bounds.data());
      std::int64_t wrong = 0, unlike_mpi = 0, tail_written = 0;
      for (int owner = 0; owner < env().size; ++owner)
        for (std::size_t i = bounds[owner]; i < bounds[owner + 1]; ++i)
          wrong += out[i] != value(owner, i);
      for (std::size_t i = 0; i < n + tail; ++i) unlike_mpi += !same_bits(out[i], host[i]);
      for (std::size_t i = n; i < n + tail; ++i) tail_written += !same_bits(out[i], untouched);
      EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "n=" << n << ", " << describe(bounds);
      EXPECT_EQ(wrong_on_any_rank(unlike_mpi), 0)
          << "differs from the MPI communicator: n=" << n << ", " << describe(bounds);
      EXPECT_EQ(wrong_on_any_rank(tail_written), 0)
          << "wrote past the pieces: n=" << n << ", " << describe(bounds);
    }
  expect_both_paths(flat, grouped);
  const std::vector<std::size_t> nothing(env().size + 1, 0);
  comm_->allgather(nullptr, nothing.data());  // nothing to do, nothing to fail
}

// A step of the sliced optimizer state's traffic: two buckets reduce-scattered,
// each with bounds of its own, and a third all-reduced, all started before
// one wait_all; then the buckets' pieces gathered, so that every rank holds
// the sums everywhere. Twice, for the tickets after wait_all.
TEST_F(Nccl, ReduceScatterBucketsThenAllgather) {
  const int size = env().size, rank = env().rank;
  const std::size_t first = 1001, second = 262147, third = 7, n = first + second + third;
  const auto bounds_a = bounds_from(first, std::vector<std::size_t>(size, 1));
  auto weights = std::vector<std::size_t>(size, 2);
  weights[0] = 0;
  weights[size - 1] = 1;
  const auto bounds_b = bounds_from(second, weights);
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = value(rank, i);
  DeviceBusy busy(*gpu_);
  for (int round = 0; round < 2; ++round) {
    auto [source, buf] = written_by_compute(*gpu_, busy, in);
    EXPECT_EQ(comm_->start_reduce_scatter_sum(buf.get(), bounds_a.data()), 0);
    EXPECT_EQ(comm_->start_reduce_scatter_sum(buf.get() + first, bounds_b.data()), 1);
    EXPECT_EQ(comm_->start_allreduce_sum(buf.get() + first + second, third), 2);
    comm_->wait_all();
    const auto scattered = download(*gpu_, buf);
    std::int64_t wrong = 0;
    for (std::size_t i = bounds_a[rank]; i < bounds_a[rank + 1]; ++i)
      wrong += scattered[i] != sum_over_ranks(i);
    for (std::size_t i = first + bounds_b[rank]; i < first + bounds_b[rank + 1]; ++i)
      wrong += scattered[i] != sum_over_ranks(i);
    for (std::size_t i = first + second; i < n; ++i) wrong += scattered[i] != sum_over_ranks(i);
    EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "own pieces after wait_all, round " << round;

    comm_->allgather(buf.get(), bounds_a.data());
    comm_->allgather(buf.get() + first, bounds_b.data());
    const auto out = download(*gpu_, buf);
    wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += out[i] != sum_over_ranks(i);
    EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "after the allgathers, round " << round;
  }
}

// A gather started on balanced pieces (the equal-piece path), then, before
// it is finished, a reduce-scatter of another buffer over more values, so
// that the staging buffer both share grows while the gather may still use
// it; both results must hold.
TEST_F(Nccl, StartedAllgatherThenLargerReduceScatter) {
  const int size = env().size, rank = env().rank;
  const std::size_t small = 1001;
  const std::size_t large = (std::size_t{1} << 20) + 3;
  const auto gather_bounds = bounds_from(small, std::vector<std::size_t>(size, 1));
  const auto sum_bounds = bounds_from(large, std::vector<std::size_t>(size, 1));
  std::vector<float> gather_in(small), sum_in(large);
  for (std::size_t i = 0; i < small; ++i) gather_in[i] = value(rank, i);
  for (std::size_t i = 0; i < large; ++i) sum_in[i] = value(rank, i);
  DeviceBusy busy(*gpu_);
  auto [gather_source, gather_buf] = written_by_compute(*gpu_, busy, gather_in);
  auto [sum_source, sum_buf] = written_by_compute(*gpu_, busy, sum_in);
  comm_->start_allgather(gather_buf.get(), gather_bounds.data());
  EXPECT_EQ(comm_->start_reduce_scatter_sum(sum_buf.get(), sum_bounds.data()), 0);
  comm_->finish_allgather();
  comm_->wait_all();
  const auto gathered = download(*gpu_, gather_buf), summed = download(*gpu_, sum_buf);
  std::int64_t wrong = 0;
  for (int owner = 0; owner < size; ++owner)
    for (std::size_t i = gather_bounds[owner]; i < gather_bounds[owner + 1]; ++i)
      wrong += gathered[i] != value(owner, i);
  for (std::size_t i = sum_bounds[rank]; i < sum_bounds[rank + 1]; ++i)
    wrong += summed[i] != sum_over_ranks(i);
  EXPECT_EQ(wrong_on_any_rank(wrong), 0);
}

}  // namespace
