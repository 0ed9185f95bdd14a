// Implements: the main of emulated_gpu_tests — the GPU tests of tests/gpu/
// (cuDNN's emulated too, include/cudnn.h), against the CPU reference, on the
// CUDA backend compiled for the host emulation, plus the tests of the
// emulator itself. No GPU needed: it runs wherever the CPU tests run. Under
// mpiexec every rank emulates a GPU of its own (so the NCCL tests, over MPI
// here, run with one GPU per rank), and a failure on any rank fails every
// rank (all_ranks_main.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include "all_ranks_main.hpp"
#include "gpu_env.hpp"

namespace gpu_test {
namespace {

Env g_env{.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .device_count = 1,
          .device = 0, .distinct = true};

}  // namespace

// gpu_test::make_gpu's make_backend("cuda") is the CUDA backend on the
// emulated device here (tests/emulated/CMakeLists.txt says how the link does it).
const Env& env() { return g_env; }

}  // namespace gpu_test

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  gpu_test::Env& e = gpu_test::g_env;
  MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e.size);
  e.local_rank = e.rank;  // one emulated device per process, on any node
  e.local_size = e.size;
  ::testing::InitGoogleTest(&argc, argv);
  return dptrain::testing_support::run_tests_on_all_ranks(e.rank);
}
