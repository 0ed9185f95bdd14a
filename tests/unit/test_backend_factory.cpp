// Implements: unit tests of the backend factory — the names it knows, the
// exit-2 refusal of an unknown or unusable backend, device counts — and of
// the transitional kind-based shims that forward to it; and Launch's rank to
// device mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/run/runtime.hpp"

namespace dptrain {
namespace {

// The exit code of the Error that f throws; fails the test if none.
template <typename F>
ExitCode error_code(F&& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  ADD_FAILURE() << "expected an Error";
  return ExitCode::kOther;
}

// 2 nodes x 4 ranks on 4 GPUs each: global ranks 4..7 of the second node
// have local ranks 0..3 and take GPUs 0..3, not 4..7 (which do not exist).
TEST(Launch, DeviceFollowsTheLocalRank) {
  for (int local = 0; local < 4; ++local) EXPECT_EQ(device_for_local_rank(local, 4), local);
  EXPECT_EQ(device_for_local_rank(5, 4), 1);  // more ranks than GPUs: wrap (refused later)
  EXPECT_EQ(device_for_local_rank(3, 0), 0);  // no GPU
}

TEST(BackendFactory, KnowsCpuAndCudaInOrder) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"cpu", "cuda"}));
}

TEST(BackendFactory, MakesTheCpuBackendByName) {
  const auto be = make_backend("cpu", BackendOptions{});
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(visible_devices("cpu"), 1);
}

TEST(BackendFactory, UnknownNameIsAUsageError) {
  std::string what;
  EXPECT_EQ(error_code([] { make_backend("tpu", BackendOptions{}); }, &what), ExitCode::kUsage);
  EXPECT_NE(what.find("'tpu'"), std::string::npos) << what;
  EXPECT_NE(what.find("cpu, cuda"), std::string::npos) << what;
  EXPECT_EQ(error_code([] { make_backend("", BackendOptions{}); }), ExitCode::kUsage);
  EXPECT_EQ(error_code([] { make_backend("CPU", BackendOptions{}); }), ExitCode::kUsage);
  EXPECT_EQ(error_code([] { visible_devices("tpu"); }), ExitCode::kUsage);
}

// Built without CUDA, or no GPU here: the refusal is exit 2 and names the device.
TEST(BackendFactory, CudaWithoutAGpuIsAUsageError) {
  if (visible_devices("cuda") > 0) GTEST_SKIP() << "a GPU is visible";
  std::string what;
  EXPECT_EQ(error_code([] { make_backend("cuda", BackendOptions{}); }, &what), ExitCode::kUsage);
  EXPECT_NE(what.find("--device cuda"), std::string::npos) << what;
}

}  // namespace
}  // namespace dptrain
