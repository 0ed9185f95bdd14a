// Implements: the naive double-precision batch norm the bn tests compare
// with — training-mode forward over [rows, channels, spatial], and the
// backward written as the textbook chain rule through mean and variance
// (not the kernels' two-sum form), plus torch's running-statistics update
// and a bound helper for float results against double references.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "dptrain/common/random.hpp"

namespace dptrain::testing {

struct BnRef {
  std::vector<double> y, dx, dweight, dbias;
  std::vector<double> mean, var;  // per channel; var biased (what normalizes)
};

inline std::size_t bn_at(int channels, int spatial, int n, int c, int i) {
  return (static_cast<std::size_t>(n) * channels + c) * spatial + i;
}

// Batch norm in training mode on x [rows, channels, spatial] with weight,
// bias, the output gradient dy and eps; two-pass statistics.
inline BnRef bn_reference(const std::vector<double>& x, int rows, int channels, int spatial,
                          const std::vector<double>& w, const std::vector<double>& b,
                          const std::vector<double>& dy, double eps) {
  BnRef r;
  r.y.assign(x.size(), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dweight.assign(channels, 0.0);
  r.dbias.assign(channels, 0.0);
  r.mean.assign(channels, 0.0);
  r.var.assign(channels, 0.0);
  const double n = static_cast<double>(rows) * spatial;
  for (int c = 0; c < channels; ++c) {
    double mean = 0, var = 0;
    for (int k = 0; k < rows; ++k)
      for (int i = 0; i < spatial; ++i) mean += x[bn_at(channels, spatial, k, c, i)];
    mean /= n;
    for (int k = 0; k < rows; ++k)
      for (int i = 0; i < spatial; ++i) var += std::pow(x[bn_at(channels, spatial, k, c, i)] - mean, 2);
    var /= n;
    const double invstd = 1.0 / std::sqrt(var + eps);
    // Chain rule: xhat = (x - mean) invstd, y = w xhat + b.
    double dvar = 0, dmean = 0, centred = 0;
    for (int k = 0; k < rows; ++k)
      for (int i = 0; i < spatial; ++i) {
        const std::size_t j = bn_at(channels, spatial, k, c, i);
        const double xhat = (x[j] - mean) * invstd;
        r.y[j] = w[c] * xhat + b[c];
        r.dweight[c] += dy[j] * xhat;
        r.dbias[c] += dy[j];
        const double dxhat = dy[j] * w[c];
        dvar += dxhat * (x[j] - mean) * -0.5 * std::pow(var + eps, -1.5);
        dmean += -dxhat * invstd;
        centred += -2.0 * (x[j] - mean);
      }
    dmean += dvar * centred / n;
    for (int k = 0; k < rows; ++k)
      for (int i = 0; i < spatial; ++i) {
        const std::size_t j = bn_at(channels, spatial, k, c, i);
        r.dx[j] = dy[j] * w[c] * invstd + dvar * 2.0 * (x[j] - mean) / n + dmean / n;
      }
    r.mean[c] = mean;
    r.var[c] = var;
  }
  return r;
}

// torch.nn.BatchNorm's update with momentum 0.1 and the unbiased variance
// over n values per channel.
inline void torch_running_update(std::vector<double>& running_mean, std::vector<double>& running_var,
                                 const BnRef& batch, double n) {
  for (std::size_t c = 0; c < running_mean.size(); ++c) {
    running_mean[c] = 0.9 * running_mean[c] + 0.1 * batch.mean[c];
    running_var[c] = 0.9 * running_var[c] + 0.1 * batch.var[c] * n / (n - 1);
  }
}

// max_i |got_i - want_i| / (rel · max_j |want_j| + abs): below 1 passes.
template <typename T>
double error_ratio(const T* got, const std::vector<double>& want, double rel, double abs = 0) {
  double scale = 0, worst = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  const double bound = rel * scale + abs;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / bound);
  return worst;
}

inline std::vector<double> normal_values(std::size_t n, std::uint64_t seed, double mean, double sd) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(mean + sd * rng.normal()));
  return v;
}

inline std::vector<float> to_floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace dptrain::testing
