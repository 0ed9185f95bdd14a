// Implements: the check of rank_printer.hpp (ctest rank_printer_np2): a test
// that fails on rank 1 only must print its message from rank 1, and the run
// must end (GoogleTest's lock is held while a failure is reported).
#include <gtest/gtest.h>
#include <mpi.h>

#include "rank_printer.hpp"

TEST(RankPrinter, FailsOnRankOne) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_NE(rank, 1) << "the failure rank 1 must report";
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  dptrain::testing_support::install_rank_printer(rank);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
