// Implements: the communicator a backend makes for its own memory — the CPU
// backend's is the MPI one over all ranks, and its sums and broadcasts are
// checked the nccl-tests way: every rank fills from its rank number, checks
// locally, and only the count of wrong values is all-reduced.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

std::int64_t wrong_on_any_rank(std::int64_t local) {
  std::int64_t total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Small integers: every partial sum is exact in float, whatever the order.
float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 97 + 1));
}

TEST(BackendComm, CpuBackendMakesTheMpiCommunicatorOfTheWorld) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = be->make_communicator(MpiCommHandle{MPI_COMM_WORLD});
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->name(), "mpi");
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);

  const std::size_t n = 1000;
  DeviceBuffer<float> buf(*be, n);
  for (std::size_t i = 0; i < n; ++i) buf.get()[i] = value(rank, i);
  comm->allreduce_sum(buf.get(), n);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int r = 0; r < size; ++r) want += value(r, i);
    wrong += buf.get()[i] != want;
  }
  EXPECT_EQ(wrong_on_any_rank(wrong), 0);

  const int root = size - 1;
  for (std::size_t i = 0; i < n; ++i) buf.get()[i] = value(rank, i);
  comm->broadcast(buf.get(), n * sizeof(float), root);
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += buf.get()[i] != value(root, i);
  EXPECT_EQ(wrong_on_any_rank(wrong), 0);
  comm->barrier();
}

}  // namespace
}  // namespace dptrain
