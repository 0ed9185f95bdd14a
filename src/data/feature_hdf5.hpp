// Implements: the HDF5 side of the feature dtypes of docs/design.md section 3
// (internal): which stored types are features, and the memory type each is
// read into, so that a row arrives in its stored width (float16 as IEEE
// binary16 bits, int16 and uint8 as integers) whatever the file's byte order.
#pragma once

#include <hdf5.h>

#include <optional>

#include "dptrain/data/feature_types.hpp"

namespace dptrain {

// The feature type of a stored HDF5 type, or nullopt when features of that
// type are not supported.
std::optional<FeatureType> feature_type_of(hid_t stored_type);

// The memory type rows of this feature type are read into. Owned by the
// library for the life of the process (never close it).
hid_t feature_memory_type(FeatureType t);

}  // namespace dptrain
