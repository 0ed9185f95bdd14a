// Implements: the CPU row kernels (row_kernels.hpp) as vector loops
// (vector_clones.hpp) over the fixed-lane reductions and exp_approx of
// vector_math.hpp; statistics in double, elementwise work in float.
#include "backends/cpu/row_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "backends/cpu/vector_clones.hpp"
#include "backends/cpu/vector_math.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"

namespace dptrain::cpu_rows {
namespace {

using cpu_vec::exp_approx;
using cpu_vec::lane_max;
using cpu_vec::lane_sum;
using cpu_vec::lane_sum2;

std::size_t at(int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); }

}  // namespace

DPT_VECTOR_CLONES
void layer_norm(const float* x, const float* weight, const float* bias, int r0, int r1, int dim,
                float eps, float* y, float* mean, float* rstd) {
  for (int r = r0; r < r1; ++r) {
    const float* xr = x + at(r, dim);
    const double mu = lane_sum(dim, [&](int c) { return static_cast<double>(xr[c]); }) / dim;
    const double sq = lane_sum(dim, [&](int c) {
      const double d = xr[c] - mu;
      return d * d;
    });
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / std::sqrt(sq / dim + eps));
    float* yr = y + at(r, dim);
    for (int c = 0; c < dim; ++c) yr[c] = (xr[c] - m) * s * weight[c] + bias[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

DPT_VECTOR_CLONES
void layer_norm_grad(const float* x, const float* dy, const float* weight, const float* mean,
                     const float* rstd, int r0, int r1, int dim, float* dx, const float* add,
                     std::uint16_t* dx_bf16) {
  for (int r = r0; r < r1; ++r) {
    const float* xr = x + at(r, dim);
    const float* g = dy + at(r, dim);
    const float m = mean[r], s = rstd[r];
    double sum_g, sum_gx;
    lane_sum2(dim, [&](int c, double& a, double& b) {
      const double gh = static_cast<double>(g[c]) * weight[c];
      a += gh;
      b += gh * ((xr[c] - m) * s);
    }, sum_g, sum_gx);
    const float mean_g = static_cast<float>(sum_g / dim);
    const float mean_gx = static_cast<float>(sum_gx / dim);
    float* d = dx + at(r, dim);
    for (int c = 0; c < dim; ++c) {
      const float xh = (xr[c] - m) * s;
      d[c] = s * (g[c] * weight[c] - mean_g - xh * mean_gx);
    }
    // The shortcut's gradient and the copy, while the row is in cache.
    if (add)
      for (int c = 0; c < dim; ++c) d[c] = d[c] + add[at(r, dim) + std::size_t(c)];
    if (dx_bf16)
      for (int c = 0; c < dim; ++c) dx_bf16[at(r, dim) + std::size_t(c)] = bf16_bits(d[c]);
  }
}

// Each column adds its rows in order; the vector runs across columns.
DPT_VECTOR_CLONES
void layer_norm_param_grad(const float* x, const float* dy, const float* mean, const float* rstd,
                           int rows, int dim, int c0, int c1, float* __restrict dweight,
                           float* __restrict dbias) {
  for (int c = c0; c < c1; ++c) dweight[c] = dbias[c] = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float* __restrict xr = x + at(r, dim);
    const float* __restrict g = dy + at(r, dim);
    const float m = mean[r], s = rstd[r];
    for (int c = c0; c < c1; ++c) {
      dweight[c] += g[c] * ((xr[c] - m) * s);
      dbias[c] += g[c];
    }
  }
}

// dst[j] = scale·src[j] for j < valid, −∞ for valid <= j < n. dst may be
// src (each j reads src[j] before it writes dst[j], and no other: hence
// ivdep); src[j >= valid] is read but never used.
inline void scale_masked(const float* src, float* dst, int n, int valid, float scale) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
#pragma GCC ivdep
  for (int j = 0; j < n; ++j) dst[j] = j < valid ? src[j] * scale : kMinusInf;
}

// v[j] = e^(v[j] − max) for j < valid, 0 for valid <= j < n.
inline void exp_masked(float* __restrict v, int n, int valid, float max) {
  for (int j = 0; j < n; ++j) {
    const float e = exp_approx(v[j] - max);
    v[j] = j < valid ? e : 0.0f;
  }
}

// Whole rows of t, the masked keys as −∞ (their e as 0): the same values as
// passes over the valid keys alone, with no short tails.
DPT_VECTOR_CLONES
void attention_softmax(const float* scores, int r0, int r1, int t, float scale, bool causal,
                       float* p) {
  for (int r = r0; r < r1; ++r) {
    float* out = p + at(r, t);
    const int valid = causal ? r % t + 1 : t;  // query position r % t sees keys <= it
    scale_masked(scores + at(r, t), out, t, valid, scale);
    const float zmax = lane_max(out, t, -std::numeric_limits<float>::infinity());
    exp_masked(out, t, valid, zmax);
    const float inv = static_cast<float>(
        1.0 / lane_sum(t, [&](int j) { return static_cast<double>(out[j]); }));
    for (int j = 0; j < t; ++j) out[j] *= inv;
  }
}

DPT_VECTOR_CLONES
void attention_softmax_grad(const float* p, const float* dp, int r0, int r1, int t, float scale,
                            float* dscores) {
  for (int r = r0; r < r1; ++r) {
    const float* pr = p + at(r, t);
    const float* g = dp + at(r, t);
    const float d = static_cast<float>(
        lane_sum(t, [&](int j) { return static_cast<double>(pr[j]) * g[j]; }));
    float* out = dscores + at(r, t);
    for (int j = 0; j < t; ++j) out[j] = scale * pr[j] * (g[j] - d);
  }
}

DPT_VECTOR_CLONES
void softmax_xent(const float* logits, const std::int32_t* labels, int r0, int r1, int cols,
                  float grad_scale, float* dlogits, double* loss_sum, std::int64_t* correct) {
  for (int r = r0; r < r1; ++r) {
    const float* z = logits + at(r, cols);
    // The first maximum, as a scan with "z[c] > z[arg]" finds it (a NaN z[0]
    // stays the maximum; no other NaN is one).
    const float zmax = lane_max(z, cols, z[0]);
    int arg = 0;
    while (arg < cols && !(z[arg] == zmax)) ++arg;
    if (arg == cols) arg = 0;
    // Read before d is written: d may be z itself (the gradient written
    // over the logits, Model::output_grad).
    const int label = labels[r];
    const float z_label = z[label];
    float* d = dlogits ? dlogits + at(r, cols) : nullptr;
    double sum;
    if (d) {
      if (d != z) std::copy_n(z, cols, d);
      exp_masked(d, cols, cols, zmax);
      sum = lane_sum(cols, [&](int c) { return static_cast<double>(d[c]); });
    } else {
      sum = lane_sum(cols, [&](int c) { return static_cast<double>(exp_approx(z[c] - zmax)); });
    }
    *loss_sum += std::log(sum) - static_cast<double>(z_label - zmax);
    if (arg == label) ++*correct;
    if (d) {
      const float inv = static_cast<float>(1.0 / sum);
      for (int c = 0; c < cols; ++c) d[c] = grad_scale * (d[c] * inv);
      d[label] -= grad_scale;
    }
  }
}

}  // namespace dptrain::cpu_rows
