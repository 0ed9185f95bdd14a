// Implements: the test hooks of test_hooks.hpp: each reads its environment
// variable (RANK:STEP ones once per process) and says whether it fires.
#include "dptrain/common/test_hooks.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dptrain::test_hooks {
namespace {

// A "RANK:STEP" hook: the rank and step where the fault happens; rank -1
// (never fires) when the variable is unset or not RANK:STEP.
struct RankStepHook {
  int rank = -1;
  std::uint64_t step = 0;
  explicit RankStepHook(const char* var) {
    if (const char* v = std::getenv(var)) {
      unsigned long long st = 0;
      if (std::sscanf(v, "%d:%llu", &rank, &st) == 2) step = st;
      else rank = -1;
    }
  }
  bool fires(int r, std::uint64_t s) const { return rank == r && step == s; }
};

}  // namespace

bool signal_at_start() { return std::getenv("DPTRAIN_TEST_SIGNAL_AT_START") != nullptr; }

bool nan_in_shard_at(int rank, std::uint64_t step) {
  static const RankStepHook hook("DPTRAIN_TEST_NAN_AT");
  return hook.fires(rank, step);
}

bool perturb_tower_at(int rank, std::uint64_t step) {
  static const RankStepHook hook("DPTRAIN_TEST_PERTURB_AT");
  return hook.fires(rank, step);
}

void slow_checkpoint_pause() {
  const char* v = std::getenv("DPTRAIN_TEST_SLOW_CHECKPOINT_MS");
  const long ms = v ? std::strtol(v, nullptr, 10) : 0;
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

std::size_t nccl_staging_floats(std::size_t default_floats) {
  static const long long floats = [] {
    const char* v = std::getenv("DPTRAIN_TEST_NCCL_STAGING_FLOATS");
    return v ? std::strtoll(v, nullptr, 10) : 0LL;
  }();
  return floats > 0 ? static_cast<std::size_t>(floats) : default_floats;
}

}  // namespace dptrain::test_hooks
