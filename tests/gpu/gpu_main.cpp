// Implements: the main of the GPU test binary, run by ctest under mpiexec -n 1
// and 2. Exits 77 (ctest: skipped) on every rank when any rank sees no GPU;
// otherwise rank 0 prints in full, other ranks their failures only, and a
// failure on any rank fails every rank (the failure count is all-reduced at
// the end), as in tests/mpi/mpi_main.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "all_ranks_main.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "gpu_env.hpp"

namespace gpu_test {
namespace {

Env g_env;

// NCCL refuses two ranks on one GPU, and CUDA_VISIBLE_DEVICES may map
// different ordinals to one GPU, so compare the GPUs' UUIDs within the node.
bool gpus_distinct(MPI_Comm node, int local_size, int device) {
  constexpr int kUuidChars = 64;
  char mine[kUuidChars] = {};
  const std::string uuid = dptrain::cuda_device_uuid(device);
  std::strncpy(mine, uuid.c_str(), kUuidChars - 1);
  std::vector<char> all(static_cast<std::size_t>(kUuidChars) * local_size);
  MPI_Allgather(mine, kUuidChars, MPI_CHAR, all.data(), kUuidChars, MPI_CHAR, node);
  std::vector<std::string> ids;
  for (int i = 0; i < local_size; ++i) ids.emplace_back(all.data() + i * kUuidChars);
  std::sort(ids.begin(), ids.end());
  const bool unknown = std::any_of(ids.begin(), ids.end(), [](const std::string& s) { return s.empty(); });
  return !unknown && std::adjacent_find(ids.begin(), ids.end()) == ids.end();
}

}  // namespace

const Env& env() { return g_env; }

}  // namespace gpu_test

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  gpu_test::Env& e = gpu_test::g_env;
  MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e.size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, e.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &e.local_rank);
  MPI_Comm_size(node, &e.local_size);

  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) {  // listing needs no GPU
    const int rc = e.rank == 0 ? RUN_ALL_TESTS() : 0;
    MPI_Comm_free(&node);
    MPI_Finalize();
    return rc;
  }

  // Every rank must take the same path, or a rank would wait alone.
  e.device_count = dptrain::visible_devices("cuda");
  int fewest = 0;
  MPI_Allreduce(&e.device_count, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest == 0) {
    if (e.rank == 0) std::printf("no GPU visible: skipping GPU tests\n");
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 77;
  }
  e.device = e.local_rank % e.device_count;
  int distinct = gpu_test::gpus_distinct(node, e.local_size, e.device) ? 1 : 0;
  int all_distinct = 0;
  MPI_Allreduce(&distinct, &all_distinct, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  e.distinct = all_distinct == 1;
  MPI_Comm_free(&node);
  if (e.rank == 0)
    std::printf("GPU tests: %d rank(s), %d GPU(s) visible on rank 0, %s\n", e.size,
                e.device_count, e.distinct ? "one GPU per rank" : "ranks share GPUs (NCCL tests skip)");

  return dptrain::testing_support::run_tests_on_all_ranks(e.rank);
}
