// Implements: the main of the MPI test binary, run by ctest under
// mpiexec -n 1..4. Rank 0 prints in full, every other rank its failures only
// (rank_printer.hpp); a failure on any rank fails the run on every rank
// (all_ranks_main.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include "all_ranks_main.hpp"

namespace {

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  return dptrain::testing_support::run_tests_on_all_ranks(rank);
}
