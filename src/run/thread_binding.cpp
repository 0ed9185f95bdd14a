// Implements: the per-rank thread-to-CPU check (see thread_binding.hpp).
#include "dptrain/run/thread_binding.hpp"

#include <sched.h>

#include <vector>

#include "dptrain/common/error.hpp"

namespace dptrain {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string thread_binding_warning(MPI_Comm world, int threads) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const int mine = affinity_cpus();
  std::vector<int> cpus(rank == 0 ? size : 0);
  DPT_MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, cpus.data(), 1, MPI_INT, 0, world));
  if (rank != 0) return "";
  std::string ranks;
  int fewest = threads;
  for (int r = 0; r < size; ++r) {
    if (cpus[r] <= 0 || cpus[r] >= threads) continue;
    if (!ranks.empty()) ranks += ",";
    ranks += std::to_string(r);
    fewest = std::min(fewest, cpus[r]);
  }
  if (ranks.empty()) return "";
  const std::string t = std::to_string(threads);
  return "rank(s) " + ranks + " run " + t + " threads on " + std::to_string(fewest) +
         " CPU(s) of their affinity mask, so the threads take turns; give each rank " + t +
         " CPUs (mpirun --map-by slot:PE=" + t + ", or --bind-to none; srun --cpus-per-task=" + t +
         ") or pass --threads " + std::to_string(fewest);
}

}  // namespace dptrain
