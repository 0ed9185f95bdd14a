// Implements: feature dtypes (dataset.hpp, feature_types.hpp): their sizes
// and names, the conversion of stored rows to float, and their HDF5 types.
#include "feature_types.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace dptrain {

std::size_t feature_item_bytes(FeatureType t) {
  switch (t) {
    case FeatureType::kUint8: return 1;
    case FeatureType::kFloat16:
    case FeatureType::kInt16: return 2;
    case FeatureType::kFloat32: break;
  }
  return 4;
}

const char* feature_type_name(FeatureType t) {
  switch (t) {
    case FeatureType::kUint8: return "uint8";
    case FeatureType::kFloat16: return "float16";
    case FeatureType::kInt16: return "int16";
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

namespace {

// IEEE binary16 in the host's byte order (what numpy's float16 is in
// memory), so the bits read can be taken as std::uint16_t.
hid_t make_half_type() {
  const hid_t t = H5Tcopy(H5T_NATIVE_FLOAT);
  H5Tset_fields(t, 15, 10, 5, 0, 10);  // sign bit, exponent at 10 (5 bits), mantissa (10)
  H5Tset_size(t, 2);
  H5Tset_precision(t, 16);
  H5Tset_ebias(t, 15);
  return t;
}

bool is_ieee_half(hid_t t) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
  return H5Tget_size(t) == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 &&
         msize == 10 && H5Tget_ebias(t) == 15;
}

}  // namespace

std::optional<FeatureType> feature_type_of(hid_t t) {
  const std::size_t size = H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_FLOAT:
      if (size == 4) return FeatureType::kFloat32;
      if (is_ieee_half(t)) return FeatureType::kFloat16;
      return std::nullopt;
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(t) != H5T_SGN_NONE;
      if (size == 1 && !is_signed) return FeatureType::kUint8;
      if (size == 2 && is_signed) return FeatureType::kInt16;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

hid_t feature_memory_type(FeatureType t) {
  switch (t) {
    case FeatureType::kUint8: return H5T_NATIVE_UINT8;
    case FeatureType::kInt16: return H5T_NATIVE_INT16;
    case FeatureType::kFloat16: {
      static const hid_t half = make_half_type();
      return half;
    }
    case FeatureType::kFloat32: break;
  }
  return H5T_NATIVE_FLOAT;
}

}  // namespace dptrain
