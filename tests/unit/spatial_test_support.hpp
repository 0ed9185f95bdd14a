// Implements: what the spatial layer tests share: a layer built from one
// --model token and bound to host arenas on the CPU backend, random
// inputs, and the check of a float result against a double reference
// within the error bound its arithmetic allows (spatial_reference.hpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/common/random.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "spatial_reference.hpp"

namespace dptrain {

// One layer on host arenas (the CPU backend's memory is host memory).
struct BoundLayer {
  std::unique_ptr<Layer> layer;
  std::vector<float> params, grads;

  BoundLayer(Backend& be, const std::string& token, const Shape& input, int max_rows) {
    LayerContext ctx;
    ctx.input = input;
    const LayerSpec spec = parse_model_spec(token + ",dense:1")[0];
    ctx.name = spec.kind + "0";
    layer = make_layer(spec, ctx);
    const std::size_t n = arena_size(layer->params());
    params.assign(n, 0.0f);
    grads.assign(n, 0.0f);
    layer->bind({params.data(), grads.data(), nullptr});
    layer->allocate(be, max_rows);
  }
  // The parameter tensor called name, as a slice of params.
  std::vector<float> param(const std::string& name) const {
    for (const ParamInfo& p : layer->params())
      if (p.name == name)
        return {params.begin() + p.offset, params.begin() + p.offset + p.count};
    return {};
  }
  std::vector<float> grad(const std::string& name) const {
    for (const ParamInfo& p : layer->params())
      if (p.name == name) return {grads.begin() + p.offset, grads.begin() + p.offset + p.count};
    return {};
  }
};

// Distinct values in [-1, 1): a permutation of an even grid, so that max
// pooling has no ties and finite differences never swap a maximum.
inline std::vector<float> distinct_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(-1.0 + 2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
  Rng rng(seed);
  shuffle(v, rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// gamma_n = n u / (1 - n u), u = 2^-24: the relative bound of a float sum
// of n rounded terms.
inline double gamma(int n) {
  const double nu = n * std::ldexp(1.0, -24);
  return nu / (1.0 - nu);
}

// Every got[i] within gamma(terms) * magnitude[i] of value[i]; returns the
// largest error / bound seen (0 when exact).
inline double expect_within_bound(const std::vector<float>& got,
                                  const spatial_reference::Values& want, int terms,
                                  const std::string& what) {
  EXPECT_EQ(got.size(), want.value.size()) << what;
  double worst = 0.0;
  int reported = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.value.size()); ++i) {
    const double err = std::abs(double(got[i]) - want.value[i]);
    const double bound = gamma(terms) * want.magnitude[i];
    if (!(err <= bound) && reported++ < 5)  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want.value[i]
                    << ", error " << err << " > bound " << bound;
    if (!(err <= bound)) worst = INFINITY;
    else if (err > 0) worst = std::max(worst, err / bound);
  }
  return worst;
}

}  // namespace dptrain
