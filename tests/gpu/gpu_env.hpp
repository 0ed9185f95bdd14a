// Implements: what every GPU test needs to know about its rank — which GPU it
// uses and whether NCCL can run (each rank on its own GPU) — set once by
// gpu_main.cpp, plus the CPU+GPU fixture, DeviceBusy (long work on the
// compute stream) and small host/device helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/backend_factory.hpp"

namespace gpu_test {

struct Env {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int device_count = 0;
  int device = 0;         // this rank's CUDA device ordinal
  bool distinct = true;   // no two ranks of a node share a GPU (NCCL needs it)
};

const Env& env();

// attention: --attention's table (the option's default, auto, when not given).
inline std::unique_ptr<dptrain::Backend> make_gpu(
    dptrain::Precision p = dptrain::Precision::kFp32,
    dptrain::AttentionImpl attention = dptrain::BackendOptions{}.attention) {
  dptrain::BackendOptions o;
  o.device_index = env().device;
  o.precision = p;
  o.attention = attention;
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

// Queues about `ms` milliseconds of device work on be's compute stream and
// returns at once: the ordering tests race host work of milliseconds against
// it, so the device must lag far behind the host, on any GPU. The work is a
// chain of 4096^3 GEMMs whose count comes from timing a few of them on the
// device (markers 0 and 1). No-op on a backend without a device clock (the
// CPU runs its work before returning anyway), and on the host emulation of
// CUDA (tests/emulated/), whose streams run only when the host waits for
// them: there the device lags the host as far as it can without this.
class DeviceBusy {
 public:
  explicit DeviceBusy(dptrain::Backend& be)
      : be_(be), device_(lags_by_work(be)), a_(be, device_ ? kN * kN : 1),
        c_(be, device_ ? kN * kN : 1) {
    if (!device_) return;
    gemm();  // cuBLAS picks its kernel on the first call
    be_.synchronize();
    be_.mark(0);
    for (int i = 0; i < kTimed; ++i) gemm();
    be_.mark(1);
    gemm_ms_ = std::max(1e-3, be_.marker_ms(0, 1) / kTimed);
  }
  void queue(double ms) {
    if (!device_) return;
    for (int i = 0, n = static_cast<int>(std::ceil(ms / gemm_ms_)); i < n; ++i) gemm();
  }
  double gemm_ms() const { return gemm_ms_; }

 private:
  static constexpr int kN = 4096, kTimed = 4;
  static bool lags_by_work(const dptrain::Backend& be) {
#if defined(DPTRAIN_EMULATED_DEVICE)
    (void)be;
    return false;
#else
    return be.caps().device_clock;
#endif
  }
  void gemm() {
    be_.gemm(false, false, kN, kN, kN, 1.0f, a_.get(), kN, a_.get(), kN, 0.0f, c_.get(), kN);
  }
  dptrain::Backend& be_;
  bool device_;
  dptrain::DeviceBuffer<float> a_, c_;  // zeros: the time does not depend on the values
  double gemm_ms_ = 1.0;
};

// Built for the host emulation of CUDA (tests/emulated/), whose libraries
// compute as the CUDA backend's kernels do: tests there can ask for bits.
#if defined(DPTRAIN_EMULATED_DEVICE)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

// What a bf16 buffer starts as to show whether it was written: a NaN that
// no rounding makes (a rounded NaN is 0x7fff).
inline constexpr std::uint16_t kNotWritten = 0x7fc1;

// The bf16 rounding of scale · v, element by element.
inline std::vector<std::uint16_t> bf16_bits_of(const std::vector<float>& v, float scale = 1.0f) {
  std::vector<std::uint16_t> bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = dptrain::bf16_bits(scale * v[i]);
  return bits;
}

// Whether copy is values rounded to bf16, bit for bit.
inline bool is_bf16_rounding(const std::vector<std::uint16_t>& copy,
                             const std::vector<float>& values) {
  return copy == bf16_bits_of(values);
}
// The values of v rounded to bf16.
inline std::vector<float> values_of_bf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dptrain::bf16_value(dptrain::bf16_bits(v[i]));
  return out;
}

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
