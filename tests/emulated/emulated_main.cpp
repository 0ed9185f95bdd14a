// Implements: the main of emulated_gpu_tests — the GPU tests of tests/gpu/
// that need no cuDNN, NCCL or device clock, against the CPU reference, on
// the CUDA backend compiled for the host emulation, plus the tests of the
// emulator itself. One process, one emulated device, no GPU needed: it runs
// wherever the CPU tests run.
#include <gtest/gtest.h>
#include <mpi.h>

#include "gpu_env.hpp"

namespace gpu_test {
namespace {

Env g_env{.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .device_count = 1,
          .device = 0, .distinct = true};

}  // namespace

// gpu_test::make_gpu's make_backend("cuda") is the CUDA backend on the
// emulated device here (emulated_libraries.cpp says how the link does it).
const Env& env() { return g_env; }

}  // namespace gpu_test

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's defaults for this binary: no leak report at exit, which
// would be Open MPI's own allocations (what is checked is out-of-bounds use).
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

int main(int argc, char** argv) {
  // The CPU reference may make communicators; one rank is enough here.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
