// Implements: the NCCL communicator checked the nccl-tests way — every rank
// fills its buffer from its rank number, computes the expected result
// locally, counts wrong elements, and the count is all-reduced (over MPI), so
// nothing is gathered. Also the stream ordering against the compute stream,
// checked so that it fails on one rank too when an event is missing. The
// calls over pieces are in test_nccl_pieces.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/nccl_comm.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "gpu_env.hpp"
#include "nccl_fixture.hpp"

namespace {

using dptrain::DeviceBuffer;
using gpu_test::DeviceBusy;
using gpu_test::download;
using gpu_test::env;
using gpu_test::Nccl;
using gpu_test::upload;
using gpu_test::value;

TEST_F(Nccl, Identity) {
  EXPECT_EQ(comm_->name(), "nccl");
  EXPECT_EQ(comm_->rank(), env().rank);
  EXPECT_EQ(comm_->size(), env().size);
}

TEST_F(Nccl, AllreduceSum) {
  const int size = env().size, rank = env().rank;
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{257}, std::size_t{1000 * 37},
                        (std::size_t{1} << 22) + 5}) {
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = value(rank, i);
    auto buf = upload(*gpu_, in);
    comm_->allreduce_sum(buf.get(), n);
    const auto out = download(*gpu_, buf);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int r = 0; r < size; ++r) want += value(r, i);
      wrong += out[i] != want;
    }
    EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "n=" << n;
  }
  comm_->allreduce_sum(nullptr, 0);  // nothing to do, nothing to fail
}

// No host synchronization anywhere between the fill, the all-reduce and the
// bias add (a kernel that reads and rewrites every value): only the events
// between the two streams order them.
TEST_F(Nccl, OrderedWithComputeStream) {
  const std::size_t n = std::size_t{1} << 24;
  DeviceBuffer<float> buf(*gpu_, n);
  const auto one = upload(*gpu_, std::vector<float>{1.0f});
  std::int64_t wrong = 0;
  for (int round = 0; round < 3; ++round) {
    gpu_->fill(buf.get(), static_cast<float>(env().rank + round), n);
    comm_->allreduce_sum(buf.get(), n);
    gpu_->kernels<dptrain::DenseKernels>().add_bias(buf.get(), one.get(), static_cast<int>(n),
                                                    1);  // buf += 1
    const auto out = download(*gpu_, buf);
    float want = 1.0f;
    for (int r = 0; r < env().size; ++r) want += static_cast<float>(r + round);
    for (float x : out) wrong += x != want;
  }
  EXPECT_EQ(wrong_on_any_rank(wrong), 0);
}

// On one rank an in-place sum moves no data, so the test above cannot see a
// missing event there; an out-of-place sum copies `in` to `out` on the
// communicator's stream, which makes both directions of the ordering
// visible, on any number of ranks, with no host wait in between:
//  - after_compute: `in` is written by the compute stream behind ~100 ms of
//    queued GEMMs; a sum that does not wait for the compute stream runs at
//    once and reduces the stale -1s.
//  - before_compute: a first sum of 1 GiB keeps the communicator's stream
//    busy for a while after `in` is written; a compute-stream copy of `out`
//    that does not wait for the second sum runs microseconds after the fill
//    and copies the stale -2s.
// Either way `seen` differs from the sum of rank + 1 over the ranks.
TEST_F(Nccl, OutOfPlaceSumIsOrderedWithComputeStream) {
  const std::size_t n = std::size_t{1} << 22, big = std::size_t{1} << 28;
  DeviceBuffer<float> in(*gpu_, n), out(*gpu_, n), seen(*gpu_, n);
  DeviceBuffer<float> big_in(*gpu_, big), big_out(*gpu_, big);
  DeviceBusy busy(*gpu_);
  float want = 0.0f;
  for (int r = 0; r < env().size; ++r) want += static_cast<float>(r + 1);
  std::int64_t wrong = 0;
  for (int round = 0; round < 2; ++round) {
    gpu_->fill(in.get(), -1.0f, n);
    gpu_->fill(out.get(), -2.0f, n);
    gpu_->synchronize();
    busy.queue(100.0);
    gpu_->fill(in.get(), static_cast<float>(env().rank + 1), n);
    dptrain::nccl_allreduce_sum(*comm_, big_in.get(), big_out.get(), big);
    dptrain::nccl_allreduce_sum(*comm_, in.get(), out.get(), n);
    gpu_->copy_device(seen.get(), out.get(), n * sizeof(float));
    for (float x : download(*gpu_, seen)) wrong += x != want;
  }
  EXPECT_EQ(wrong_on_any_rank(wrong), 0)
      << "an out-of-place sum read its input before the compute stream wrote it, or the "
         "compute stream read the result before the sum wrote it";
}

TEST_F(Nccl, Broadcast) {
  const int size = env().size, rank = env().rank;
  const std::size_t bytes = 1000003;
  auto pattern = [](int r, std::size_t i) { return static_cast<std::uint8_t>((i * 31 + r * 7) & 0xff); };
  for (int root = 0; root < size; ++root) {
    std::vector<std::uint8_t> in(bytes);
    for (std::size_t i = 0; i < bytes; ++i) in[i] = pattern(rank, i);
    auto buf = upload(*gpu_, in);
    comm_->broadcast(buf.get(), bytes, root);
    const auto out = download(*gpu_, buf);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i) wrong += out[i] != pattern(root, i);
    EXPECT_EQ(wrong_on_any_rank(wrong), 0) << "root " << root;
  }
}

TEST_F(Nccl, Barrier) {
  comm_->barrier();
  comm_->barrier();
  SUCCEED();
}

}  // namespace
