// Implements: the stored feature dtypes of docs/design.md section 3: their
// sizes and names, and the conversion of stored rows to float.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dptrain {

// Stored feature dtypes (docs/design.md section 3). The values travel between
// ranks (shared_set.cpp): append new ones, never renumber.
// kTokenId: the ids of a token set's windows (int32 whatever the stored
// type), which travel and reach the model as int32 bit patterns.
enum class FeatureType { kFloat32, kUint8, kFloat16, kInt16, kTokenId };
std::size_t feature_item_bytes(FeatureType t);  // 4, 1, 2, 2, 4
const char* feature_type_name(FeatureType t);   // "float32", "uint8", ..., "token id"

// Converts stored features to float: uint8 scaled by 1/255, float16 exactly
// (subnormals, Inf and NaN included), int16 and float32 as they are; token
// ids are copied bit for bit (tensor.hpp: the model reads them as int32).
void convert_features(FeatureType type, const void* raw, std::size_t count, float* out);
// One IEEE binary16 value (its bits) as float, exactly.
float half_to_float(std::uint16_t bits);

}  // namespace dptrain
