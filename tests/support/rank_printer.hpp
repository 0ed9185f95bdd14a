// Implements: GoogleTest output for a test binary run on several MPI ranks.
// Rank 0 keeps the default printer; every other rank's printer is replaced
// by one that prints only its failures, each line prefixed "[rank N]", so a
// failure on rank 3 says what failed there rather than only that it did.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace dptrain::testing_support {

class FailureOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailureOnlyPrinter(int rank) : rank_(rank) {}

  // The name is kept here: GoogleTest holds its lock while it reports a
  // part result, so current_test_info() there would deadlock.
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s failed at %s:%d\n[rank %d] %s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), rank_, r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_ = "(outside a test)";
};

// Call after InitGoogleTest.
inline void install_rank_printer(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new FailureOnlyPrinter(rank));  // owned by GoogleTest
}

}  // namespace dptrain::testing_support
