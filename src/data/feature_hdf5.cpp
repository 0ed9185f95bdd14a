// Implements: the HDF5 types of the feature dtypes (see feature_hdf5.hpp).
#include "data/feature_hdf5.hpp"

namespace dptrain {

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
    case FeatureType::kTokenId: return H5T_NATIVE_INT32;
    case FeatureType::kFloat16: {
      static const hid_t half = make_half_type();
      return half;
    }
    case FeatureType::kFloat32: break;
  }
  return H5T_NATIVE_FLOAT;
}

}  // namespace dptrain
