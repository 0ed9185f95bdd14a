// Implements: the CPU normalization kernels (batch norm) as hand-written
// loops. oneDNN's batch-normalization primitive computes its statistics
// and its backward sums inside one call, with no point in between where the
// sums of the other replicas could be added, so `bn` over the global batch
// cannot use it. Per-channel reductions accumulate in double, each channel
// in a fixed order (rows, then positions, in four interleaved lanes), and
// threads split channels or rows, never one sum: the bits do not depend on
// the thread count or the instruction set.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"

namespace dptrain {
namespace {

// Below this many values a parallel region costs more than it saves.
constexpr std::size_t kParallelValues = 1 << 15;

std::size_t values(const NormShape& s) {
  return static_cast<std::size_t>(s.rows) * s.channels * s.spatial;
}

// Where channel c of row n begins in a [rows, channels, spatial] tensor.
std::size_t at(const NormShape& s, int n, int c) {
  return (static_cast<std::size_t>(n) * s.channels + c) * s.spatial;
}

// Four in-order partial sums (fixed association, independent of the ISA).
struct Lanes {
  double v[4] = {0.0, 0.0, 0.0, 0.0};
  double total() const { return (v[0] + v[1]) + (v[2] + v[3]); }
};

// a += Σ (x - k), b += Σ (x - k)² over one channel's span of one row.
void shifted_sums(const float* x, std::size_t len, double k, Lanes& a, Lanes& b) {
  std::size_t i = 0;
  for (; i + 4 <= len; i += 4)
    for (int l = 0; l < 4; ++l) {
      const double d = static_cast<double>(x[i + l]) - k;
      a.v[l] += d;
      b.v[l] += d * d;
    }
  for (; i < len; ++i) {
    const double d = static_cast<double>(x[i]) - k;
    a.v[0] += d;
    b.v[0] += d * d;
  }
}

// dy from the gradient dz and the gate (NormKernels::grad_sums): relu's
// backward where there is a gate, dz or +0.0f. A select by bit mask, never
// a branch: the gate's sign is as good as random, and a branch on it
// mispredicts about every other value.
inline float gated(const float* gate, const float* dz, std::size_t i) {
  if (!gate) return dz[i];
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(gate[i] > 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(dz[i]) & keep);
}

// a += Σ dy · (x - m), b += Σ dy over one channel's span of one row.
void grad_span_sums(const float* x, const float* gate, const float* dz, std::size_t len,
                    double m, Lanes& a, Lanes& b) {
  std::size_t i = 0;
  for (; i + 4 <= len; i += 4)
    for (int l = 0; l < 4; ++l) {
      const double g = gated(gate, dz, i + l);
      a.v[l] += g * (static_cast<double>(x[i + l]) - m);
      b.v[l] += g;
    }
  for (; i < len; ++i) {
    const double g = gated(gate, dz, i);
    a.v[0] += g * (static_cast<double>(x[i]) - m);
    b.v[0] += g;
  }
}

class CpuNormKernels final : public NormKernels {
 public:
  void batch_sums(const float* x, const NormShape& s, const float* shift, float* sums) override {
    const int C = s.channels;
#pragma omp parallel for schedule(static) if (values(s) > kParallelValues)
    for (int c = 0; c < C; ++c) {
      Lanes a, b;
      for (int n = 0; n < s.rows; ++n) shifted_sums(x + at(s, n, c), s.spatial, shift[c], a, b);
      sums[c] = static_cast<float>(a.total());
      sums[C + c] = static_cast<float>(b.total());
    }
  }

  void batch_stats(const float* sums, const float* shift, int channels, double count, float eps,
                   float momentum, float* mean, float* invstd, float* running_mean,
                   float* running_var) override {
    const double mom = momentum;
    const double unbias = count > 1.0 ? count / (count - 1.0) : 1.0;
    for (int c = 0; c < channels; ++c) {
      const double m1 = static_cast<double>(sums[c]) / count;  // mean - shift
      const double mu = static_cast<double>(shift[c]) + m1;    // before running_mean changes
      const double var = std::fmax(0.0, static_cast<double>(sums[channels + c]) / count - m1 * m1);
      mean[c] = static_cast<float>(mu);
      invstd[c] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
      running_mean[c] = static_cast<float>((1.0 - mom) * running_mean[c] + mom * mu);
      running_var[c] = static_cast<float>((1.0 - mom) * running_var[c] + mom * var * unbias);
    }
  }

  void inverse_std(const float* var, int channels, float eps, float* invstd) override {
    for (int c = 0; c < channels; ++c)
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps));
  }

  void normalize(const float* x, const NormShape& s, const float* mean, const float* invstd,
                 const float* weight, const float* bias, bool relu, float* y) override {
#pragma omp parallel for schedule(static) if (values(s) > kParallelValues)
    for (int n = 0; n < s.rows; ++n)
      for (int c = 0; c < s.channels; ++c) {
        const float m = mean[c], k = invstd[c] * weight[c], b = bias[c];
        const float* xr = x + at(s, n, c);
        float* yr = y + at(s, n, c);
        if (relu) {
          for (int i = 0; i < s.spatial; ++i) {
            const float v = (xr[i] - m) * k + b;
            yr[i] = v > 0.0f ? v : 0.0f;
          }
        } else {
          for (int i = 0; i < s.spatial; ++i) yr[i] = (xr[i] - m) * k + b;
        }
      }
  }

  void grad_sums(const float* x, const float* gate, const float* dz, const NormShape& s,
                 const float* mean, const float* invstd, float* sums) override {
    const int C = s.channels;
#pragma omp parallel for schedule(static) if (values(s) > kParallelValues)
    for (int c = 0; c < C; ++c) {
      Lanes a, b;
      for (int n = 0; n < s.rows; ++n)
        grad_span_sums(x + at(s, n, c), gate ? gate + at(s, n, c) : nullptr, dz + at(s, n, c),
                       s.spatial, mean[c], a, b);
      sums[c] = static_cast<float>(a.total() * invstd[c]);
      sums[C + c] = static_cast<float>(b.total());
    }
  }

  void input_grad(const float* x, const float* gate, const float* dz, const NormShape& s,
                  const float* mean, const float* invstd, const float* weight, const float* sums,
                  double count, float* dx) override {
    const int C = s.channels;
#pragma omp parallel for schedule(static) if (values(s) > kParallelValues)
    for (int n = 0; n < s.rows; ++n)
      for (int c = 0; c < C; ++c) {
        const float m = mean[c], is = invstd[c];
        const float k = is * weight[c];
        const auto mean_dy = static_cast<float>(sums[C + c] / count);
        const auto mean_dyxhat = static_cast<float>(sums[c] / count);
        const std::size_t o = at(s, n, c);
        for (int i = 0; i < s.spatial; ++i) {
          const float xhat = (x[o + i] - m) * is;
          dx[o + i] = k * (gated(gate, dz, o + i) - mean_dy - xhat * mean_dyxhat);
        }
      }
  }
};

}  // namespace

template <>
std::unique_ptr<NormKernels> make_cpu_kernels<NormKernels>() {
  return std::make_unique<CpuNormKernels>();
}

}  // namespace dptrain
