// Implements: GoogleTest output for a test binary run on several MPI ranks.
// Rank 0 keeps the default printer; every other rank's printer is replaced
// by one that prints only its failures, each line prefixed "[rank N]", so a
// failure on rank 3 says what failed there rather than only that it did.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace dptrain::testing_support {

class FailureOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailureOnlyPrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::fprintf(stderr, "[rank %d] %s.%s failed at %s:%d\n[rank %d] %s\n", rank_,
                 info ? info->test_suite_name() : "?", info ? info->name() : "?",
                 r.file_name() ? r.file_name() : "?", r.line_number(), rank_, r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

// Call after InitGoogleTest.
inline void install_rank_printer(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new FailureOnlyPrinter(rank));  // owned by GoogleTest
}

}  // namespace dptrain::testing_support
