// Implements: what the spatial layer families (conv, pool) share: reading
// a per-sample Shape {C, H, W} or {C, D, H, W} as channels and extents,
// building the output Shape back, the argument parser of their tokens, and
// how their build-time errors name the layer.
#pragma once

#include <charconv>
#include <string>
#include <vector>

#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "model/layers/family.hpp"

namespace dptrain {

// Spatial dimensions of a per-sample shape: 2 for {C, H, W}, 3 for
// {C, D, H, W}; Error(kUsage) naming the layer for anything else.
inline int spatial_rank(const Shape& input, const std::string& label) {
  DPT_REQUIRE(input.rank() == 3 || input.rank() == 4, ExitCode::kUsage,
              label + " needs a spatial input [C, H, W] or [C, D, H, W]; got " +
                  input.to_string());
  return input.rank() - 1;
}

// The extents after the channel dimension: {H, W} or {D, H, W}.
inline SpatialExtent spatial_extent(const Shape& s) {
  SpatialExtent e{};
  for (int i = 1; i < s.rank(); ++i) e[static_cast<std::size_t>(i - 1)] = s[i];
  return e;
}

// {channels, extents...}.
inline Shape spatial_shape(int channels, int dims, const SpatialExtent& e) {
  if (dims == 2) return Shape{channels, e[0], e[1]};
  return Shape{channels, e[0], e[1], e[2]};
}

// {v, v, v}: the square (cubic) kernels, strides and paddings of the spec.
inline SpatialExtent uniform_extent(int v) { return {v, v, v}; }

// The ':'-separated arguments after a token's kind ("conv:8:3" -> {"8", "3"}).
inline std::vector<std::string> token_args(const std::string& token) {
  std::vector<std::string> parts;
  std::size_t pos = token.find(':');
  while (pos != std::string::npos) {
    const auto next = token.find(':', pos + 1);
    parts.push_back(token.substr(pos + 1, next == std::string::npos ? next : next - pos - 1));
    pos = next;
  }
  return parts;
}

// One integer argument of a spatial token, at least `min`; throws
// BadLayerToken naming `what`.
inline int parse_spatial_arg(const std::string& s, const char* what, int min) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw BadLayerToken(std::string(what) + " must be an integer");
  if (v < min) throw BadLayerToken(std::string(what) + " must be >= " + std::to_string(min));
  return v;
}

// Runs make_plan (a backend's plan request) with its errors prefixed by
// the layer's name, so a backend that cannot run it says which layer.
template <typename MakePlan>
auto plan_for(const std::string& layer, MakePlan make_plan) {
  try {
    return make_plan();
  } catch (const Error& e) {
    throw Error(e.code(), layer + ": " + e.what(), e.where());
  }
}

}  // namespace dptrain
