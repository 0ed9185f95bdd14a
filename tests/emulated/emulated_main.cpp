// Implements: the main of emulated_gpu_tests — the GPU kernel tests of
// tests/gpu/ (those of this project's own kernels) against the CPU
// reference, with gpu_test::make_gpu giving the emulated CUDA backend, plus
// the tests of the emulator itself. One process, one emulated device, no
// GPU needed: it runs wherever the CPU tests run.
#include <gtest/gtest.h>
#include <mpi.h>

#include "emulated_backend.hpp"
#include "gpu_env.hpp"

namespace gpu_test {
namespace {

Env g_env{.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .device_count = 1,
          .device = 0, .distinct = true};

}  // namespace

const Env& env() { return g_env; }

std::unique_ptr<dptrain::Backend> make_gpu(dptrain::Precision p) {
  dptrain::BackendOptions o;
  o.precision = p;
  return emulated::make_emulated_cuda_backend(o);
}

}  // namespace gpu_test

int main(int argc, char** argv) {
  // The CPU reference may make communicators; one rank is enough here.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
