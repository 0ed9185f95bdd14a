// Implements: the main of the MPI test binary, run by ctest under
// mpiexec -n 1..4. Rank 0 prints in full, every other rank its failures only
// (rank_printer.hpp); a failure on any rank fails the run on every rank (the
// failure count is all-reduced at the end).
#include <gtest/gtest.h>
#include <mpi.h>

#include "rank_printer.hpp"

namespace {

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  dptrain::testing_support::install_rank_printer(rank);
  const int local = RUN_ALL_TESTS() == 0 ? 0 : 1;
  int failed = 0;
  MPI_Allreduce(&local, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && failed > 0) std::fprintf(stderr, "%d rank(s) had failures\n", failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
