// Implements: unit tests of the CPU backend's row kernels (layer norm and its
// gradients, the attention softmax and its gradient, softmax cross-entropy;
// src/backends/cpu/row_kernels.cpp): the same bits for 1, 2 and 3 threads,
// and against double references, within bounds from their float roundings,
// for row lengths around the 16-lane blocks of the sums (1 ... 40, 133).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain {
namespace {

using Floats = std::vector<float>;
constexpr double kU = 0x1p-24;  // float's unit roundoff
// exp_approx's largest relative error, measured over every float in
// [−87, 88] (src/backends/cpu/vector_math.hpp).
constexpr double kExpError = 1.03e-7;

Floats random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::unique_ptr<Backend> cpu(int threads) {
  BackendOptions opts;
  opts.threads = threads;
  return make_backend("cpu", opts);
}

struct NormOut {
  Floats y, mean, rstd, dx, dweight, dbias;
  bool operator==(const NormOut&) const = default;
};

NormOut run_norm(Backend& be, const Floats& x, const Floats& w, const Floats& b, const Floats& dy,
                 int rows, int dim) {
  NormOut o{Floats(x.size()), Floats(rows), Floats(rows), Floats(x.size()), Floats(dim), Floats(dim)};
  auto& k = be.kernels<SequenceKernels>();
  k.layer_norm(x.data(), w.data(), b.data(), rows, dim, 1e-5f, o.y.data(), o.mean.data(), o.rstd.data());
  k.layer_norm_grad(x.data(), dy.data(), w.data(), o.mean.data(), o.rstd.data(), rows, dim, o.dx.data());
  k.layer_norm_param_grad(x.data(), dy.data(), o.mean.data(), o.rstd.data(), rows, dim,
                          o.dweight.data(), o.dbias.data(), nullptr);
  return o;
}

// Rows of D values with an offset (a mean far from 0 tests the two-pass
// variance). mean and rstd: the double statistics rounded once to float,
// within u of the exact ones. y = ((x − m)·s)·w + b: m and s off by u, then
// five roundings: |y − y*| <= u·(s|w|(|μ| + 4|x − μ|) + |y*|) to first order
// (1.01 covers the rest). dx from the kernel's own m, s and float x̂: six
// float roundings, none of more than 4u·s·(|g·w| + |mean g·w| +
// |x̂·mean g·w·x̂|) (6u taken).
// The parameter gradients are float sums in row order of float products:
// bitwise the scalar loop's.
TEST(CpuRowKernels, LayerNormMatchesDoubleReference) {
  for (int dim : {1, 2, 15, 16, 17, 31, 32, 33, 40, 133}) {
    const int rows = 7;
    const Floats x = random_floats(static_cast<std::size_t>(rows) * dim, dim, 2.0f, 4.0f);
    const Floats w = random_floats(dim, 100 + dim, 0.5f, 1.5f), b = random_floats(dim, 200 + dim);
    const Floats dy = random_floats(x.size(), 300 + dim);
    const NormOut o = run_norm(*cpu(1), x, w, b, dy, rows, dim);
    Floats dweight(dim, 0.0f), dbias(dim, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* xr = x.data() + static_cast<std::size_t>(r) * dim;
      const float* g = dy.data() + static_cast<std::size_t>(r) * dim;
      double mu = 0.0, var = 0.0, sum_g = 0.0, sum_gx = 0.0;
      for (int c = 0; c < dim; ++c) mu += xr[c];
      mu /= dim;
      for (int c = 0; c < dim; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      const double s = 1.0 / std::sqrt(var / dim + 1e-5f);
      ASSERT_LE(std::fabs(o.mean[r] - mu), kU * std::fabs(mu) * 1.01) << dim;
      ASSERT_LE(std::fabs(o.rstd[r] - s), kU * s * 1.01) << dim;
      const float m = o.mean[r], sf = o.rstd[r];
      for (int c = 0; c < dim; ++c) {
        const double gh = static_cast<double>(g[c]) * w[c];
        sum_g += gh;
        sum_gx += gh * static_cast<double>((xr[c] - m) * sf);
      }
      const double mean_g = sum_g / dim, mean_gx = sum_gx / dim;
      for (int c = 0; c < dim; ++c) {
        const std::size_t i = static_cast<std::size_t>(r) * dim + c;
        const double y = (xr[c] - mu) * s * w[c] + b[c];
        const double y_bound = kU * (s * w[c] * (std::fabs(mu) + 4 * std::fabs(xr[c] - mu)) + std::fabs(y));
        ASSERT_LE(std::fabs(o.y[i] - y), y_bound * 1.01 + 1e-30) << dim << " " << r << " " << c;
        const double xh = (xr[c] - m) * sf, gh = static_cast<double>(g[c]) * w[c];
        const double dx = sf * (gh - mean_g - xh * mean_gx);
        const double dx_bound = 6 * kU * sf * (std::fabs(gh) + std::fabs(mean_g) + std::fabs(xh * mean_gx));
        ASSERT_LE(std::fabs(o.dx[i] - dx), dx_bound + 1e-30) << dim << " " << r << " " << c;
        dweight[c] += g[c] * ((xr[c] - m) * sf);
        dbias[c] += g[c];
      }
    }
    EXPECT_EQ(o.dweight, dweight) << dim;
    EXPECT_EQ(o.dbias, dbias) << dim;
  }
}

// Rows split over threads (statistics per row) and columns split over
// threads (parameter gradients in row order): 1, 2 and 3 threads give the
// same bits, on a shape above the kernels' parallel threshold (2^15 values).
TEST(CpuRowKernels, LayerNormBitsDoNotDependOnThreads) {
  const int rows = 700, dim = 133;
  const Floats x = random_floats(static_cast<std::size_t>(rows) * dim, 1, -3.0f, 5.0f);
  const Floats w = random_floats(dim, 2, 0.5f, 1.5f), b = random_floats(dim, 3), dy = random_floats(x.size(), 4);
  const NormOut one = run_norm(*cpu(1), x, w, b, dy, rows, dim);
  for (int threads : {2, 3}) EXPECT_TRUE(run_norm(*cpu(threads), x, w, b, dy, rows, dim) == one) << threads;
}

struct SoftmaxOut {
  Floats p, ds;
  bool operator==(const SoftmaxOut&) const = default;
};

SoftmaxOut run_softmax(Backend& be, const Floats& z, const Floats& dp, const HeadShape& s,
                       float scale, bool causal) {
  SoftmaxOut o{z, Floats(z.size())};  // in place, as the attention layer calls it
  auto& k = be.kernels<SequenceKernels>();
  k.attention_softmax(o.p.data(), s, scale, causal, o.p.data());
  k.attention_softmax_grad(o.p.data(), dp.data(), s, scale, o.ds.data());
  return o;
}

// p from the kernel's own float steps up to the exp (v = fl(z·scale),
// fl(v − max)), then e^ in double: the kernel's exp is off by kExpError, the
// sum by as much, and 1/sum and the product round once each. dscores =
// scale·p·(dp − d), d = Σ p·dp in double rounded once: four roundings of
// terms at most scale·p·(|dp| + |d|). Masked keys: exactly 0, and NaN
// there changes nothing.
TEST(CpuRowKernels, AttentionSoftmaxMatchesDoubleReference) {
  for (int t : {1, 5, 16, 17, 33, 40})
    for (bool causal : {false, true}) {
      const HeadShape s{2, t, 3, 4};
      const int rows = s.batch * s.heads * t;
      const float scale = 0.5f;
      Floats z = random_floats(static_cast<std::size_t>(rows) * t, t, -8.0f, 8.0f);
      const Floats dp = random_floats(z.size(), 50 + t);
      const SoftmaxOut o = run_softmax(*cpu(1), z, dp, s, scale, causal);
      for (int r = 0; r < rows; ++r) {
        const int valid = causal ? r % t + 1 : t;
        const std::size_t row = static_cast<std::size_t>(r) * t;
        float vmax = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < valid; ++j) vmax = std::max(vmax, z[row + j] * scale);
        double sum = 0.0, dot = 0.0;
        for (int j = 0; j < valid; ++j) sum += std::exp(static_cast<double>(z[row + j] * scale - vmax));
        for (int j = 0; j < t; ++j) {
          const double p = j < valid ? std::exp(static_cast<double>(z[row + j] * scale - vmax)) / sum : 0.0;
          ASSERT_LE(std::fabs(o.p[row + j] - p), (2 * kExpError + 2 * kU) * p * 1.01)
              << "T " << t << " causal " << causal << " row " << r << " key " << j;
          dot += static_cast<double>(o.p[row + j]) * dp[row + j];
        }
        for (int j = 0; j < t; ++j) {
          const double pj = o.p[row + j], ds = scale * pj * (dp[row + j] - dot);
          const double bound = 4 * kU * scale * pj * (std::fabs(dp[row + j]) + std::fabs(dot));
          ASSERT_LE(std::fabs(o.ds[row + j] - ds), bound * 1.01) << "T " << t << " row " << r;
        }
      }
      if (!causal) continue;
      for (int r = 0; r < rows; ++r)
        for (int j = r % t + 1; j < t; ++j) z[static_cast<std::size_t>(r) * t + j] = NAN;
      EXPECT_EQ(run_softmax(*cpu(1), z, dp, s, scale, causal).p, o.p) << "NaN in the masked half";
    }
}

TEST(CpuRowKernels, AttentionSoftmaxBitsDoNotDependOnThreads) {
  const HeadShape s{4, 67, 3, 8};  // 804 rows of 67: above the parallel threshold
  const Floats z = random_floats(static_cast<std::size_t>(s.batch * s.heads * s.tokens) * s.tokens, 7, -6.0f, 6.0f);
  const Floats dp = random_floats(z.size(), 8);
  for (bool causal : {false, true}) {
    const SoftmaxOut one = run_softmax(*cpu(1), z, dp, s, 0.35f, causal);
    for (int threads : {2, 3})
      EXPECT_TRUE(run_softmax(*cpu(threads), z, dp, s, 0.35f, causal) == one) << threads << causal;
  }
}

// Per row, loss = log Σ e^(z − max) − (z[label] − max), the differences
// the kernel's float ones: its exps off by kExpError (so the log by as
// much); the total rounded once to float. Gradient scale·(p − [label]): p
// as in the softmax above, then a product and, at the label, a difference
// rounded. Ties (a row of equal values, a maximum twice) count the first.
TEST(CpuRowKernels, SoftmaxXentMatchesDoubleReference) {
  for (int cols : {1, 2, 15, 16, 17, 40, 257}) {
    const int rows = 9;
    Floats z = random_floats(static_cast<std::size_t>(rows) * cols, cols, -20.0f, 20.0f);
    std::vector<std::int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % cols;
    for (int c = 0; c < cols; ++c) z[static_cast<std::size_t>(1) * cols + c] = 0.25f;  // row 1: all ties
    if (cols >= 3) z[2 * cols + 1] = z[2 * cols + cols - 1] = 30.0f;  // row 2: max at 1 and cols − 1
    labels[1] = 0;
    labels[2] = 1 % cols;
    const float scale = 1.0f / rows;
    Floats d(z.size()), stats = {0.0f, 0.0f}, eval_stats = {0.0f, 0.0f};
    auto be = cpu(1);
    be->kernels<LossKernels>().softmax_xent(z.data(), labels.data(), rows, cols, scale, d.data(), stats.data());
    be->kernels<LossKernels>().softmax_xent(z.data(), labels.data(), rows, cols, 0.0f, nullptr, eval_stats.data());
    EXPECT_EQ(eval_stats, stats) << "the evaluation pass computes the same stats";
    double loss = 0.0, loss_bound = 0.0;
    int correct = 0;
    for (int r = 0; r < rows; ++r) {
      const float* zr = z.data() + static_cast<std::size_t>(r) * cols;
      int arg = 0;
      for (int c = 1; c < cols; ++c)
        if (zr[c] > zr[arg]) arg = c;
      double sum = 0.0;
      for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(zr[c] - zr[arg]));
      loss += std::log(sum) - static_cast<double>(zr[labels[r]] - zr[arg]);
      loss_bound += kExpError * 1.01;
      correct += arg == labels[r];
      for (int c = 0; c < cols; ++c) {
        const double p = std::exp(static_cast<double>(zr[c] - zr[arg])) / sum;
        const double g = scale * (p - (c == labels[r] ? 1.0 : 0.0));
        const double bound = (2 * kExpError + 3 * kU) * scale * p * 1.01 + (c == labels[r] ? kU * std::fabs(g) : 0.0);
        ASSERT_LE(std::fabs(d[static_cast<std::size_t>(r) * cols + c] - g), bound + 1e-30)
            << cols << " row " << r << " col " << c;
      }
    }
    EXPECT_LE(std::fabs(stats[0] - loss), loss_bound + kU * loss) << cols;
    EXPECT_EQ(stats[1], static_cast<float>(correct)) << cols;
  }
}

}  // namespace
}  // namespace dptrain
