// Implements: what the cuDNN spatial tests share — geometries, one run of a
// convolution or pooling plan on any backend from host vectors (outputs
// start as NaN, so every value must be written), the double reference's
// term magnitudes (tests/unit/spatial_reference.hpp) and the error bound
// check built on them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../unit/spatial_reference.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/build_config.hpp"
#include "dptrain/common/error.hpp"
#include "gpu_env.hpp"

namespace gpu_test {

namespace ref = dptrain::spatial_reference;

inline dptrain::ConvGeometry conv_geometry(int dims, int in_channels, int out_channels,
                                           dptrain::SpatialExtent input, int kernel, int stride,
                                           int padding, int max_rows) {
  dptrain::ConvGeometry g;
  g.dims = dims;
  g.in_channels = in_channels;
  g.out_channels = out_channels;
  g.input = input;
  g.max_rows = max_rows;
  for (std::size_t d = 0; d < std::size_t(dims); ++d) {
    g.kernel[d] = kernel;
    g.stride[d] = stride;
    g.padding[d] = padding;
    g.output[d] = (input[d] + 2 * padding - kernel) / stride + 1;
  }
  return g;
}

inline dptrain::PoolGeometry pool_geometry(dptrain::PoolKind kind, int dims, int channels,
                                           dptrain::SpatialExtent input, int window, int stride,
                                           int max_rows) {
  dptrain::PoolGeometry g;
  g.kind = kind;
  g.dims = dims;
  g.channels = channels;
  g.input = input;
  g.max_rows = max_rows;
  for (std::size_t d = 0; d < std::size_t(dims); ++d) {
    g.window[d] = window;
    g.stride[d] = stride;
    g.output[d] = (input[d] - window) / stride + 1;
  }
  return g;
}

// The reference's 3-D form: an image is a volume of depth 1.
inline ref::Geometry reference_of(const dptrain::ConvGeometry& g) {
  ref::Geometry r;
  r.in_channels = g.in_channels;
  r.out_channels = g.out_channels;
  const std::size_t first = 3 - std::size_t(g.dims);
  for (std::size_t d = 0; d < std::size_t(g.dims); ++d) {
    r.input[first + d] = g.input[d];
    r.kernel[first + d] = g.kernel[d];
    r.stride[first + d] = g.stride[d];
    r.padding[first + d] = g.padding[d];
  }
  return r;
}

inline ref::Geometry reference_of(const dptrain::PoolGeometry& g) {
  ref::Geometry r;
  r.in_channels = r.out_channels = g.channels;
  const std::size_t first = 3 - std::size_t(g.dims);
  for (std::size_t d = 0; d < std::size_t(g.dims); ++d) {
    r.input[first + d] = g.input[d];
    r.kernel[first + d] = g.window[d];
    r.stride[first + d] = g.stride[d];
  }
  return r;
}

inline std::string describe(const ref::Geometry& r, int rows) {
  std::string s = std::to_string(r.in_channels) + "->" + std::to_string(r.out_channels) + " on ";
  for (int d = 0; d < 3; ++d) {
    if (d) s += 'x';
    s += std::to_string(r.input[std::size_t(d)]);
  }
  s += ", k" + std::to_string(r.kernel[2]) + " s" + std::to_string(r.stride[2]) + " p" +
       std::to_string(r.padding[2]) + ", rows " + std::to_string(rows);
  return s;
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// |got - want| <= c * magnitude + 1e-30 everywhere (NaN fails): the error
// bound of a sum whose terms' magnitudes add up to `magnitude`.
inline ::testing::AssertionResult within_bound(const std::vector<float>& got,
                                               const std::vector<float>& want,
                                               const std::vector<double>& magnitude, double c) {
  if (got.size() != want.size() || got.size() != magnitude.size())
    return ::testing::AssertionFailure() << "sizes differ";
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double allowed = c * magnitude[i] + 1e-30;
    const double ratio = std::isnan(err) ? 1e300 : err / allowed;
    if (ratio > 1.0) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values beyond " << c
         << " x their terms' magnitude; worst at " << worst << ": got " << got[worst] << ", want "
         << want[worst] << " (" << worst_ratio << " x the bound)";
}

struct ConvInputs {
  std::vector<float> x, w, b, dy;
};
struct ConvOutputs {
  std::vector<float> y, dx, dw, db;
};

inline std::size_t elements(int rows, int channels, const dptrain::SpatialExtent& e, int dims) {
  std::size_t n = std::size_t(rows) * std::size_t(channels);
  for (std::size_t d = 0; d < std::size_t(dims); ++d) n *= std::size_t(e[d]);
  return n;
}

// All three passes of plan (made on be) over rows.
inline ConvOutputs run_conv(dptrain::Backend& be, dptrain::ConvPlan& plan,
                            const dptrain::ConvGeometry& g, int rows, const ConvInputs& in) {
  auto x = upload(be, in.x), w = upload(be, in.w), b = upload(be, in.b), dy = upload(be, in.dy);
  dptrain::DeviceBuffer<float> y(be, elements(rows, g.out_channels, g.output, g.dims));
  dptrain::DeviceBuffer<float> dx(be, in.x.size()), dw(be, in.w.size()), db(be, in.b.size());
  for (auto* buf : {&y, &dx, &dw, &db}) be.fill(buf->get(), NAN, buf->size());
  plan.forward(x.get(), w.get(), b.get(), y.get(), rows);
  plan.backward_data(dy.get(), w.get(), dx.get(), rows);
  plan.backward_weights(x.get(), dy.get(), dw.get(), db.get(), rows);
  return {download(be, y), download(be, dx), download(be, dw), download(be, db)};
}

inline ConvInputs random_conv_inputs(const dptrain::ConvGeometry& g, int rows, std::uint32_t seed) {
  return {random_vector(elements(rows, g.in_channels, g.input, g.dims), seed),
          random_vector(elements(g.out_channels, g.in_channels, g.kernel, g.dims), seed + 1),
          random_vector(std::size_t(g.out_channels), seed + 2),
          random_vector(elements(rows, g.out_channels, g.output, g.dims), seed + 3)};
}

struct PoolOutputs {
  std::vector<float> y, dx;
};

// forward then backward of plan over rows.
inline PoolOutputs run_pool(dptrain::Backend& be, dptrain::PoolPlan& plan, int rows,
                            const std::vector<float>& x_host, const std::vector<float>& dy_host) {
  auto x = upload(be, x_host), dy = upload(be, dy_host);
  dptrain::DeviceBuffer<float> y(be, dy_host.size()), dx(be, x_host.size());
  be.fill(y.get(), NAN, y.size());
  be.fill(dx.get(), NAN, dx.size());
  plan.forward(x.get(), y.get(), rows);
  plan.backward(dy.get(), dx.get(), rows);
  return {download(be, y), download(be, dx)};
}

// The fixture of the cuDNN tests: skipped in a build without cuDNN, whose
// refusal test_spatial_refusal.cpp checks instead.
class CudnnSpatial : public CpuAndGpu {
 protected:
  void SetUp() override {
    if (!DPTRAIN_HAVE_CUDNN) GTEST_SKIP() << "built without cuDNN";
  }
};

}  // namespace gpu_test
