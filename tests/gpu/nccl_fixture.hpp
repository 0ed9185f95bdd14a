// Implements: the fixture of the NCCL communicator's GPU tests
// (test_nccl.cpp, test_nccl_pieces.cpp): one NCCL communicator over every
// rank, the MPI one beside it as the reference, and the data both fill
// their buffers with. Named (not in an anonymous namespace), so that both
// files' tests share one test suite, Nccl.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "gpu_env.hpp"

namespace gpu_test {

class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!env().distinct) return;
    gpu_ = gpu_test::make_gpu();
    comm_ = gpu_->make_communicator(dptrain::MpiCommHandle{MPI_COMM_WORLD});
    mpi_ = dptrain::make_mpi_communicator(MPI_COMM_WORLD);
  }
  static void TearDownTestSuite() {
    mpi_.reset();
    comm_.reset();
    gpu_.reset();
  }
  void SetUp() override {
    if (!env().distinct) GTEST_SKIP() << "ranks share a GPU; NCCL needs one GPU per rank";
    ASSERT_NE(comm_, nullptr) << "the NCCL communicator could not be created";
  }
  static std::int64_t wrong_on_any_rank(std::int64_t local) {
    std::int64_t total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return total;
  }
  inline static std::unique_ptr<dptrain::Backend> gpu_;
  inline static std::unique_ptr<dptrain::Communicator> comm_;
  // The reference for the calls over pieces.
  inline static std::unique_ptr<dptrain::Communicator> mpi_;
};

// Small integers: every partial sum is exact in float, whatever NCCL's order.
inline float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 97 + 1));
}

}  // namespace gpu_test
