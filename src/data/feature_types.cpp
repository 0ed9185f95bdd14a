// Implements: feature dtypes (see feature_types.hpp): their sizes and names,
// and the conversion of stored rows to float.
#include "dptrain/data/feature_types.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace dptrain {

std::size_t feature_item_bytes(FeatureType t) {
  switch (t) {
    case FeatureType::kUint8: return 1;
    case FeatureType::kFloat16:
    case FeatureType::kInt16: return 2;
    case FeatureType::kFloat32:
    case FeatureType::kTokenId: break;
  }
  return 4;
}

const char* feature_type_name(FeatureType t) {
  switch (t) {
    case FeatureType::kUint8: return "uint8";
    case FeatureType::kFloat16: return "float16";
    case FeatureType::kInt16: return "int16";
    case FeatureType::kTokenId: return "token id";
    case FeatureType::kFloat32: break;
  }
  return "float32";
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  // Inf and NaN keep an all-ones exponent (and NaN its payload); normal
  // numbers move from bias 15 to bias 127.
  const std::uint32_t e = exponent == 0x1fu ? 0xffu : exponent + (127 - 15);
  return std::bit_cast<float>(sign | (e << 23) | (mantissa << 13));
}

void convert_features(FeatureType type, const void* raw, std::size_t count, float* out) {
  switch (type) {
    case FeatureType::kFloat32:
    case FeatureType::kTokenId:
      std::memcpy(out, raw, count * sizeof(float));
      return;
    case FeatureType::kUint8: {
      const auto* in = static_cast<const std::uint8_t*>(raw);
      constexpr float kScale = 1.0f / 255.0f;
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]) * kScale;
      return;
    }
    case FeatureType::kFloat16: {
      const auto* in = static_cast<const std::uint16_t*>(raw);
      for (std::size_t i = 0; i < count; ++i) out[i] = half_to_float(in[i]);
      return;
    }
    case FeatureType::kInt16: {
      const auto* in = static_cast<const std::int16_t*>(raw);
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
      return;
    }
  }
}

}  // namespace dptrain
