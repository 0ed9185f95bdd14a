// Implements: unit tests of the feature dtypes of docs/design.md section 3 beyond
// float32 and uint8: float16 (files of either byte order, every bit pattern
// converted exactly, Inf and NaN refused by validate) and int16 (used as
// they are), and the message for a dtype that is not supported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "data/feature_hdf5.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/dataset.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using testing::write_array;

class FeatureTypesTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) { return dir_ + "/" + name; }
  std::string dir_ = testing::scratch_dir("feature_types");
};

// binary16 from its fields, computed in double: the reference for
// half_to_float (NaN and Inf checked by class).
double half_reference(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                         : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

TEST(HalfToFloat, EveryBitPatternIsExact) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float v = half_to_float(bits);
    const int exponent = (bits >> 10) & 31;
    if (exponent == 31) {
      if (bits & 1023) ASSERT_TRUE(std::isnan(v)) << std::hex << b;
      else ASSERT_EQ(v, (bits >> 15) ? -INFINITY : INFINITY) << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(v), half_reference(bits)) << std::hex << b;
    ASSERT_EQ(std::signbit(v), (bits >> 15) != 0) << std::hex << b;  // -0 stays -0
  }
}

// A binary16 file type of the given byte order, made as h5py makes one.
h5::DataType half_file_type(bool big_endian) {
  h5::DataType t(H5Tcopy(big_endian ? H5T_IEEE_F32BE : H5T_IEEE_F32LE));
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_precision(t.get(), 16);
  H5Tset_ebias(t.get(), 15);
  return t;
}

// 1, -2, the smallest subnormal, the largest finite, 0.5, -0.
const std::vector<std::uint16_t> kHalfBits = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x3800, 0x8000};

void write_labels(const std::string& file, hsize_t n) {
  std::vector<std::int32_t> labels(n, 1);
  write_array(file, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {n}, labels.data());
}

TEST_F(FeatureTypesTest, Float16FeaturesOfEitherByteOrderReadAsStoredAndConvertExactly) {
  for (bool big_endian : {false, true}) {
    const std::string file = path(big_endian ? "f16be.h5" : "f16le.h5");
    const h5::DataType stored = half_file_type(big_endian);
    // [N, C, H, W] = [3, 2, 1, 1].
    write_array(file, "/train/features", stored.get(), feature_memory_type(FeatureType::kFloat16),
                {3, 2, 1, 1}, kHalfBits.data());
    write_labels(file, 3);
    Dataset d(file, "train");
    EXPECT_EQ(d.info().feature_type, FeatureType::kFloat16);
    EXPECT_EQ(d.info().feature_bytes_per_row(), 4u);
    EXPECT_EQ(d.validate(10), 1);
    std::vector<std::uint16_t> raw(6);
    d.read_rows(0, 3, raw.data(), nullptr);
    EXPECT_EQ(raw, kHalfBits) << (big_endian ? "big-endian" : "little-endian");
    std::vector<float> f(6);
    convert_features(FeatureType::kFloat16, raw.data(), raw.size(), f.data());
    EXPECT_EQ(f[0], 1.0f);
    EXPECT_EQ(f[1], -2.0f);
    EXPECT_EQ(f[2], std::ldexp(1.0f, -24));
    EXPECT_EQ(f[3], 65504.0f);
    EXPECT_EQ(f[4], 0.5f);
    EXPECT_TRUE(f[5] == 0.0f && std::signbit(f[5]));
  }
}

TEST_F(FeatureTypesTest, Float16InfAndNanAreRefusedWithTheirIndex) {
  for (std::uint16_t bad : {std::uint16_t(0x7c00), std::uint16_t(0x7e00)}) {
    const std::string file = path("f16bad.h5");
    std::remove(file.c_str());
    std::vector<std::uint16_t> bits(5 * 4, 0x3c00);
    bits[3 * 4 + 2] = bad;  // row 3, element 2
    write_array(file, "/train/features", half_file_type(false).get(),
                feature_memory_type(FeatureType::kFloat16), {5, 4}, bits.data());
    write_labels(file, 5);
    Dataset d(file, "train");
    try {
      d.validate(10);
      ADD_FAILURE() << "validate accepted " << std::hex << bad;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ExitCode::kData);
      EXPECT_NE(m.find("f16bad.h5: /train/features"), std::string::npos) << m;
      EXPECT_NE(m.find(bad == 0x7c00 ? "Inf at index 3" : "NaN at index 3"), std::string::npos) << m;
      EXPECT_NE(m.find("element 2"), std::string::npos) << m;
    }
  }
}

TEST_F(FeatureTypesTest, Int16FeaturesAreUsedAsTheyAre) {
  const std::string file = path("i16.h5");
  const std::vector<std::int16_t> v = {-32768, -1, 0, 7, 32767, 300, -300, 12};
  // Big-endian in the file: HDF5 converts to the host's int16 on read.
  write_array(file, "/train/features", H5T_STD_I16BE, H5T_NATIVE_INT16, {2, 2, 2}, v.data());
  write_labels(file, 2);
  Dataset d(file, "train");
  EXPECT_EQ(d.info().feature_type, FeatureType::kInt16);
  EXPECT_EQ(d.info().feature_bytes_per_row(), 8u);
  EXPECT_EQ(d.validate(10), 1);
  std::vector<std::int16_t> raw(8);
  d.read_rows(0, 2, raw.data(), nullptr);
  EXPECT_EQ(raw, v);
  std::vector<float> f(8);
  convert_features(FeatureType::kInt16, raw.data(), raw.size(), f.data());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(f[i], static_cast<float>(v[i]));
}

TEST_F(FeatureTypesTest, UnsupportedDtypesNameTheSupportedOnes) {
  struct Case {
    hid_t stored, mem;
    const char* name;
  };
  for (const Case& c : {Case{H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, "float64"},
                        Case{H5T_STD_U16LE, H5T_NATIVE_UINT16, "uint16"},
                        Case{H5T_STD_I8LE, H5T_NATIVE_INT8, "int8"}}) {
    const std::string file = path(std::string(c.name) + ".h5");
    std::vector<double> zeros(8, 0.0);  // large enough for any of the types
    write_array(file, "/train/features", c.stored, c.mem, {2, 2}, zeros.data());
    write_labels(file, 2);
    try {
      Dataset d(file, "train");
      ADD_FAILURE() << c.name << " features were accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ExitCode::kData);
      EXPECT_NE(m.find(std::string("dtype ") + c.name), std::string::npos) << m;
      EXPECT_NE(m.find("need float32, float16, int16 or uint8"), std::string::npos) << m;
    }
  }
}

TEST(FeatureTypeNames, SizesAndNames) {
  EXPECT_EQ(feature_item_bytes(FeatureType::kFloat32), 4u);
  EXPECT_EQ(feature_item_bytes(FeatureType::kUint8), 1u);
  EXPECT_EQ(feature_item_bytes(FeatureType::kFloat16), 2u);
  EXPECT_EQ(feature_item_bytes(FeatureType::kInt16), 2u);
  EXPECT_STREQ(feature_type_name(FeatureType::kFloat16), "float16");
  EXPECT_STREQ(feature_type_name(FeatureType::kInt16), "int16");
}

}  // namespace
}  // namespace dptrain
