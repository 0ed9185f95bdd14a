// Implements: the end of the main of a test binary run on several MPI ranks
// (tests/mpi/, tests/gpu/, tests/emulated/): every rank runs its tests,
// rank 0 printing in full and the others their failures only
// (rank_printer.hpp), and a failure on any rank fails every rank.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "rank_printer.hpp"

namespace dptrain::testing_support {

// After InitGoogleTest: runs the tests, finalizes MPI, and returns the
// exit code of every rank (0 when no rank had a failure).
inline int run_tests_on_all_ranks(int rank) {
  install_rank_printer(rank);
  const int local = RUN_ALL_TESTS() == 0 ? 0 : 1;
  int failed = 0;
  MPI_Allreduce(&local, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && failed > 0) std::fprintf(stderr, "%d rank(s) had failures\n", failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}

}  // namespace dptrain::testing_support
