// Implements: what every GPU test needs to know about its rank — which GPU it
// uses and whether NCCL can run (each rank on its own GPU) — set once by
// gpu_main.cpp, plus the CPU+GPU fixture and small host/device helpers shared
// by the test files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dptrain/backend.hpp"

namespace gpu_test {

struct Env {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int device_count = 0;
  int device = 0;         // this rank's CUDA device ordinal
  bool distinct = true;   // no two ranks of a node share a GPU (NCCL needs it)
};

const Env& env();

inline std::unique_ptr<dptrain::Backend> make_gpu(
    dptrain::Precision p = dptrain::Precision::kFp32) {
  dptrain::BackendOptions o;
  o.device_index = env().device;
  o.precision = p;
  return dptrain::make_backend("cuda", o);
}

inline std::unique_ptr<dptrain::Backend> make_cpu() {
  dptrain::BackendOptions o;
  o.threads = 1;
  return dptrain::make_backend("cpu", o);
}

// The fixture of the kernel tests: the GPU backend under test and the CPU
// reference, made once per suite (class CudaXxx : public CpuAndGpu {};).
class CpuAndGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpu_ = make_gpu();
    cpu_ = make_cpu();
  }
  static void TearDownTestSuite() {
    gpu_.reset();
    cpu_.reset();
  }
  inline static std::unique_ptr<dptrain::Backend> gpu_, cpu_;
};

// Uniform in [lo, hi), reproducible from the seed.
inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <typename T>
dptrain::DeviceBuffer<T> upload(dptrain::Backend& be, const std::vector<T>& host) {
  dptrain::DeviceBuffer<T> buf(be, host.size());
  be.copy_to_device(buf.get(), host.data(), host.size() * sizeof(T));
  return buf;
}

template <typename T>
std::vector<T> download(dptrain::Backend& be, const T* dev, std::size_t n) {
  std::vector<T> host(n);
  be.copy_to_host(host.data(), dev, n * sizeof(T));
  return host;
}

template <typename T>
std::vector<T> download(dptrain::Backend& be, const dptrain::DeviceBuffer<T>& buf) {
  return download(be, buf.get(), buf.size());
}

// Elementwise |got - want| <= atol + rtol * |want| (NaN matches only NaN);
// on failure names how many differ and the worst one.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(g) && std::isnan(w)) continue;
    const double err = std::fabs(g - w), allowed = atol + rtol * std::fabs(w);
    if (!(err <= allowed)) {
      ++bad;
      const double excess = std::isnan(err) ? 1e300 : err - allowed;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values differ; worst at "
                                       << worst << ": got " << got[worst] << ", want "
                                       << want[worst];
}

}  // namespace gpu_test
