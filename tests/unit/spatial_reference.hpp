// Implements: naive double-precision references of convolution and
// pooling for the spatial layer tests — direct loops over every output and
// tap, no cleverness — and, beside each value, the sum of the magnitudes of
// its terms, from which a float implementation's error bound follows
// (|error| <= gamma_n * sum, gamma_n = n u / (1 - n u), u = 2^-24, for any
// order of n rounded terms). 2-D geometries are 3-D ones of depth 1.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dptrain::spatial_reference {

// Extents {D, H, W}; an image has D = 1, kernel depth 1, stride 1, pad 0.
struct Geometry {
  int in_channels = 1, out_channels = 1;  // pooling: out_channels == in_channels
  std::array<int, 3> input{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0};
  std::array<int, 3> output() const {
    std::array<int, 3> o{};
    for (int d = 0; d < 3; ++d)
      o[d] = (input[d] + 2 * padding[d] - kernel[d]) / stride[d] + 1;
    return o;
  }
  int in_size() const { return in_channels * input[0] * input[1] * input[2]; }
  int out_size() const {
    const auto o = output();
    return out_channels * o[0] * o[1] * o[2];
  }
  int taps() const { return kernel[0] * kernel[1] * kernel[2]; }
};

struct Values {
  std::vector<double> value, magnitude;  // magnitude: sum of |terms|
  explicit Values(std::size_t n = 0) : value(n, 0.0), magnitude(n, 0.0) {}
  void add(std::size_t i, double term) {
    value[i] += term;
    magnitude[i] += std::abs(term);
  }
};

// Calls f(in_index, out_index, weight_index) for every (row, input channel,
// output channel, tap) whose input position lies inside the input (taps on
// zero padding add nothing). Pooling passes out_channels == in_channels and
// visits only the diagonal (same_channel).
template <typename F>
void for_each_tap(const Geometry& g, int rows, bool same_channel, F f) {
  const auto o = g.output();
  const auto& in = g.input;
  for (int n = 0; n < rows; ++n)
    for (int co = 0; co < g.out_channels; ++co)
      for (int ci = same_channel ? co : 0; ci < (same_channel ? co + 1 : g.in_channels); ++ci)
        for (int od = 0; od < o[0]; ++od)
          for (int oh = 0; oh < o[1]; ++oh)
            for (int ow = 0; ow < o[2]; ++ow)
              for (int kd = 0; kd < g.kernel[0]; ++kd)
                for (int kh = 0; kh < g.kernel[1]; ++kh)
                  for (int kw = 0; kw < g.kernel[2]; ++kw) {
                    const int id = od * g.stride[0] - g.padding[0] + kd;
                    const int ih = oh * g.stride[1] - g.padding[1] + kh;
                    const int iw = ow * g.stride[2] - g.padding[2] + kw;
                    if (id < 0 || ih < 0 || iw < 0 || id >= in[0] || ih >= in[1] || iw >= in[2])
                      continue;
                    const std::size_t xi =
                        ((std::size_t(n) * g.in_channels + ci) * in[0] + id) * in[1] * in[2] +
                        std::size_t(ih) * in[2] + iw;
                    const std::size_t yi =
                        ((std::size_t(n) * g.out_channels + co) * o[0] + od) * o[1] * o[2] +
                        std::size_t(oh) * o[2] + ow;
                    const std::size_t wi =
                        ((std::size_t(co) * g.in_channels + ci) * g.kernel[0] + kd) *
                            g.kernel[1] * g.kernel[2] +
                        std::size_t(kh) * g.kernel[2] + kw;
                    f(xi, yi, wi);
                  }
}

inline Values conv_forward(const Geometry& g, int rows, const std::vector<double>& x,
                           const std::vector<double>& w, const std::vector<double>& b) {
  Values y(std::size_t(rows) * g.out_size());
  const std::size_t plane = y.value.size() / rows / g.out_channels;
  for (std::size_t i = 0; i < y.value.size(); ++i) y.add(i, b[(i / plane) % g.out_channels]);
  for_each_tap(g, rows, false, [&](std::size_t xi, std::size_t yi, std::size_t wi) {
    y.add(yi, w[wi] * x[xi]);
  });
  return y;
}

inline Values conv_backward_data(const Geometry& g, int rows, const std::vector<double>& dy,
                                 const std::vector<double>& w) {
  Values dx(std::size_t(rows) * g.in_size());
  for_each_tap(g, rows, false, [&](std::size_t xi, std::size_t yi, std::size_t wi) {
    dx.add(xi, w[wi] * dy[yi]);
  });
  return dx;
}

// dweight, then dbias.
inline std::array<Values, 2> conv_backward_weights(const Geometry& g, int rows,
                                                   const std::vector<double>& x,
                                                   const std::vector<double>& dy) {
  Values dw(std::size_t(g.out_channels) * g.in_channels * g.taps()), db(g.out_channels);
  for_each_tap(g, rows, false, [&](std::size_t xi, std::size_t yi, std::size_t wi) {
    dw.add(wi, x[xi] * dy[yi]);
  });
  const std::size_t plane = std::size_t(g.out_size()) / g.out_channels;
  for (std::size_t i = 0; i < dy.size(); ++i) db.add((i / plane) % g.out_channels, dy[i]);
  return {dw, db};
}

// Max pooling: the window's largest input (values are distinct in tests).
inline std::vector<double> max_pool_forward(const Geometry& g, int rows,
                                            const std::vector<double>& x) {
  std::vector<double> y(std::size_t(rows) * g.out_size(), -INFINITY);
  for_each_tap(g, rows, true, [&](std::size_t xi, std::size_t yi, std::size_t) {
    y[yi] = std::max(y[yi], x[xi]);
  });
  return y;
}

// dx[i] = sum of dy over the windows whose maximum is x[i].
inline Values max_pool_backward(const Geometry& g, int rows, const std::vector<double>& x,
                                const std::vector<double>& dy) {
  const std::vector<double> y = max_pool_forward(g, rows, x);
  Values dx(std::size_t(rows) * g.in_size());
  for_each_tap(g, rows, true, [&](std::size_t xi, std::size_t yi, std::size_t) {
    if (x[xi] == y[yi]) dx.add(xi, dy[yi]);
  });
  return dx;
}

inline Values avg_pool_forward(const Geometry& g, int rows, const std::vector<double>& x) {
  Values y(std::size_t(rows) * g.out_size());
  const double scale = 1.0 / g.taps();
  for_each_tap(g, rows, true, [&](std::size_t xi, std::size_t yi, std::size_t) {
    y.add(yi, scale * x[xi]);
  });
  return y;
}

inline Values avg_pool_backward(const Geometry& g, int rows, const std::vector<double>& dy) {
  Values dx(std::size_t(rows) * g.in_size());
  const double scale = 1.0 / g.taps();
  for_each_tap(g, rows, true, [&](std::size_t xi, std::size_t yi, std::size_t) {
    dx.add(xi, scale * dy[yi]);
  });
  return dx;
}

}  // namespace dptrain::spatial_reference
