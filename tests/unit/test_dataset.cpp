// Implements: unit tests of Dataset and the h5 helpers: structure checks and
// validation of every malformed case of docs/design.md section 3 (exit code 3,
// message naming file, dataset and first bad index), and row contents.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "dptrain/common/h5.hpp"
#include "dptrain/data/dataset.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using testing::FixtureSpec;
using testing::write_array;
using testing::write_fixture;

class DatasetTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) { return dir_ + "/" + name; }
  std::string dir_ = testing::scratch_dir("dataset");
};

// Runs fn and checks it throws Error(kData) whose message holds every part.
void expect_data_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one with '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "'" << p << "' not in: " << e.what();
  }
}

std::vector<float> floats(std::uint64_t n, float v = 0.5f) { return std::vector<float>(n, v); }
std::vector<std::int32_t> ints(std::uint64_t n, std::int32_t v = 1) {
  return std::vector<std::int32_t>(n, v);
}

TEST_F(DatasetTest, OpensAndDescribesFloatSet) {
  FixtureSpec s;
  s.rows = 50;
  s.shape = {2, 3, 4};
  s.chunk_rows = 16;
  write_fixture(path("a.h5"), s);
  Dataset d(path("a.h5"), "train");
  const SetInfo& i = d.info();
  EXPECT_EQ(i.rows, 50u);
  EXPECT_EQ(i.dim, 24u);  // trailing dims flattened
  EXPECT_EQ(i.feature_shape, (std::vector<std::uint64_t>{50, 2, 3, 4}));
  EXPECT_EQ(i.feature_type, FeatureType::kFloat32);
  EXPECT_EQ(i.label_type, LabelType::kClass);
  EXPECT_EQ(i.chunk_rows, 16u);
  EXPECT_EQ(i.feature_bytes_per_row(), 96u);
  EXPECT_EQ(d.validate(10), 9);
}

TEST_F(DatasetTest, ReadRowsReturnsStoredRowsInCOrder) {
  FixtureSpec s;
  s.rows = 70;
  s.shape = {2, 5};
  s.chunk_rows = 8;  // rows below straddle chunks
  write_fixture(path("a.h5"), s);
  Dataset d(path("a.h5"), "train");
  std::vector<float> f(13 * 10);
  std::vector<std::int32_t> l(13);
  d.read_rows(5, 13, f.data(), l.data());
  for (std::uint64_t r = 0; r < 13; ++r) {
    EXPECT_EQ(l[r], testing::fixture_label(5 + r, 10));
    for (std::uint64_t j = 0; j < 10; ++j) ASSERT_EQ(f[r * 10 + j], testing::fixture_value(5 + r, j));
  }
  d.read_rows(69, 1, nullptr, l.data());  // features skipped
  EXPECT_EQ(l[0], testing::fixture_label(69, 10));
  EXPECT_THROW(d.read_rows(60, 11, f.data(), nullptr), Error);
}

TEST_F(DatasetTest, Uint8FeaturesScaleBy1Over255) {
  FixtureSpec s;
  s.rows = 40;
  s.uint8 = true;
  write_fixture(path("u.h5"), s);
  Dataset d(path("u.h5"), "train");
  EXPECT_EQ(d.info().feature_type, FeatureType::kUint8);
  EXPECT_EQ(d.info().feature_bytes_per_row(), 12u);
  std::vector<std::uint8_t> raw(3 * 12);
  d.read_rows(10, 3, raw.data(), nullptr);
  EXPECT_EQ(raw[12 + 5], testing::fixture_byte(11, 5));
  std::vector<float> f(raw.size());
  convert_features(FeatureType::kUint8, raw.data(), raw.size(), f.data());
  EXPECT_EQ(f[12 + 5], testing::fixture_byte(11, 5) * (1.0f / 255.0f));
  const std::uint8_t edge[3] = {0, 51, 255};
  float out[3];
  convert_features(FeatureType::kUint8, edge, 3, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 0.2f);
  EXPECT_FLOAT_EQ(out[2], 1.0f);
}

TEST_F(DatasetTest, Int64LabelsReadAsInt32AndAreRangeChecked) {
  FixtureSpec s;
  s.int64_labels = true;
  s.classes = 6;
  write_fixture(path("l.h5"), s);
  Dataset d(path("l.h5"), "train");
  EXPECT_EQ(d.validate(6), 5);
  std::vector<std::int32_t> l(100);
  d.read_rows(0, 100, nullptr, l.data());
  for (std::uint64_t i = 0; i < 100; ++i) ASSERT_EQ(l[i], testing::fixture_label(i, 6));

  std::vector<std::int64_t> big(20, 1);
  big[13] = std::int64_t(1) << 33;
  write_array(path("big.h5"), "/train/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {20}, big.data());
  write_array(path("big.h5"), "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {20, 2},
              floats(40).data());
  Dataset b(path("big.h5"), "train");
  expect_data_error([&] { b.validate(0); },
                    {"big.h5", "/train/labels", "label 8589934592 at index 13", "int32"});
  expect_data_error([&] { b.validate(10); }, {"at index 13 is outside [0, 10)"});
}

TEST_F(DatasetTest, FloatTargets) {
  FixtureSpec s;
  s.targets = 3;
  write_fixture(path("t.h5"), s);
  Dataset d(path("t.h5"), "train");
  EXPECT_EQ(d.info().label_type, LabelType::kTarget);
  EXPECT_EQ(d.info().label_width, 3u);
  EXPECT_EQ(d.info().label_bytes_per_row(), 12u);
  EXPECT_EQ(d.validate(0), -1);
  std::vector<float> t(2 * 3);
  d.read_rows(98, 2, nullptr, t.data());
  EXPECT_EQ(t[3 + 2], testing::fixture_target(99, 2));
}

TEST_F(DatasetTest, StructuralErrorsNameFileAndDataset) {
  struct Case {
    std::string name;
    std::function<void(const std::string&)> write;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"no_set", [](auto& f) { write_fixture(f, {.set = "test"}); },
       {"no_set.h5", "no set 'train'", "test"}},
      {"missing_features",
       [](auto& f) { write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, ints(4).data()); },
       {"missing_features.h5", "/train/features: missing"}},
      {"missing_labels",
       [](auto& f) { write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, floats(8).data()); },
       {"missing_labels.h5", "/train/labels: missing"}},
      {"float64",
       [](auto& f) {
         std::vector<double> x(8, 1.0);
         write_array(f, "/train/features", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {4, 2}, x.data());
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, ints(4).data());
       },
       {"/train/features", "dtype float64"}},
      {"uint16",
       [](auto& f) {
         std::vector<std::uint16_t> x(8, 1);
         write_array(f, "/train/features", H5T_STD_U16LE, H5T_NATIVE_UINT16, {4, 2}, x.data());
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, ints(4).data());
       },
       {"/train/features", "dtype uint16"}},
      {"rank1",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4}, floats(4).data());
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, ints(4).data());
       },
       {"/train/features", "rank 1"}},
      {"labels_rank2",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, floats(8).data());
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4, 2}, ints(8).data());
       },
       {"/train/labels", "int32 labels of shape [4, 2]"}},
      {"labels_float64",
       [](auto& f) {
         std::vector<double> y(4, 1.0);
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, floats(8).data());
         write_array(f, "/train/labels", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {4}, y.data());
       },
       {"/train/labels", "dtype float64"}},
      {"targets_rank1",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, floats(8).data());
         write_array(f, "/train/labels", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4}, floats(4).data());
       },
       {"/train/labels", "float32 labels of shape [4]"}},
      {"n_mismatch",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, floats(8).data());
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {3}, ints(3).data());
       },
       {"n_mismatch.h5", "/train", "features have 4 rows but labels have 3"}},
      {"n_zero",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {0, 2}, nullptr);
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {0}, nullptr);
       },
       {"/train/features", "N = 0"}},
      {"d_zero",
       [](auto& f) {
         write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 0}, nullptr);
         write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, ints(4).data());
       },
       {"/train/features", "D = 0"}},
      {"too_large",  // never written, so the file stays small
       [](auto& f) {
         h5::File h = testing::open_or_create(f);
         h5::create_dataset(h.get(), "/train/features", H5T_IEEE_F32LE,
                            {hsize_t(1) << 30, 1024}, ExitCode::kOther);
         h5::create_dataset(h.get(), "/train/labels", H5T_STD_I32LE, {hsize_t(1) << 30},
                            ExitCode::kOther);
       },
       {"/train/features", "too large"}},
      {"not_hdf5",
       [](auto& f) { std::ofstream(f) << "this is not an HDF5 file\n"; },
       {"not_hdf5.h5", "not an HDF5 file"}},
      {"truncated",
       [](auto& f) {
         write_fixture(f, {.rows = 400});
         std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2);
       },
       {"truncated.h5", "cannot open HDF5 file"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string f = path(c.name + ".h5");
    c.write(f);
    expect_data_error([&] { Dataset d(f, "train"); }, c.parts);
  }
  expect_data_error([&] { Dataset d(path("absent.h5"), "train"); }, {"absent.h5", "no such file"});
}

// Writes a 30-row float set whose features and labels come from the caller.
void write_small(const std::string& f, std::vector<float> x, std::vector<std::int32_t> y) {
  write_array(f, "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {30, 4}, x.data(), 8);
  write_array(f, "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {30}, y.data(), 8);
}

TEST_F(DatasetTest, ValidateReportsFirstBadIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  {
    auto x = floats(120);
    x[9 * 4 + 3] = nan;
    x[20 * 4] = nan;
    write_small(path("nan.h5"), x, ints(30));
    Dataset d(path("nan.h5"), "train");
    expect_data_error([&] { d.validate(10); },
                      {"nan.h5", "/train/features", "NaN at index 9", "element 3"});
  }
  {
    auto x = floats(120);
    x[11 * 4 + 1] = inf;
    write_small(path("inf.h5"), x, ints(30));
    Dataset d(path("inf.h5"), "train");
    expect_data_error([&] { d.validate(10); }, {"/train/features", "Inf at index 11"});
  }
  {
    auto y = ints(30);
    y[7] = -1;
    write_small(path("neg.h5"), floats(120), y);
    Dataset d(path("neg.h5"), "train");
    expect_data_error([&] { d.validate(10); }, {"neg.h5", "/train/labels", "label -1 at index 7"});
    expect_data_error([&] { d.validate(0); }, {"label -1 at index 7 is negative"});
  }
  {
    auto y = ints(30);
    y[5] = 10;
    write_small(path("big.h5"), floats(120), y);
    Dataset d(path("big.h5"), "train");
    expect_data_error([&] { d.validate(10); }, {"/train/labels: label 10 at index 5 is outside [0, 10)"});
    EXPECT_EQ(d.validate(11), 10);
    EXPECT_EQ(d.validate(0), 10);
  }
  {  // the earlier of a bad label and a bad feature wins
    auto x = floats(120);
    x[12 * 4] = nan;
    auto y = ints(30);
    y[4] = 99;
    write_small(path("both.h5"), x, y);
    Dataset d(path("both.h5"), "train");
    expect_data_error([&] { d.validate(10); }, {"label 99 at index 4"});
    expect_data_error([&] { d.validate(100); }, {"NaN at index 12"});
  }
  {
    std::vector<float> t(30 * 2, 1.0f);
    t[4 * 2 + 1] = nan;
    testing::write_set(path("tnan.h5"), "train", floats(120), {30, 4}, t, 2);
    Dataset d(path("tnan.h5"), "train");
    expect_data_error([&] { d.validate(0); }, {"tnan.h5", "/train/labels", "NaN at index 4"});
  }
}

TEST_F(DatasetTest, ValidateFindsBadRowPastTheFirstPass) {
  // 4 MiB rows: validation reads a few rows per pass, so row 6 is in a later one.
  const hsize_t d = hsize_t(1) << 20;
  std::vector<float> x(8 * d, 0.25f);
  x[6 * d + 17] = -std::numeric_limits<float>::infinity();
  write_array(path("wide.h5"), "/train/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {8, d},
              x.data(), 1);
  write_array(path("wide.h5"), "/train/labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {8}, ints(8).data());
  Dataset ds(path("wide.h5"), "train");
  expect_data_error([&] { ds.validate(2); }, {"-Inf at index 6", "element 17"});
}

TEST_F(DatasetTest, ListSetsFindsGroupsWithFeaturesAndLabels) {
  const std::string f = path("sets.h5");
  write_fixture(f, {.set = "train"});
  write_fixture(f, {.set = "test", .rows = 10});
  write_array(f, "/half/features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 2}, floats(4).data());
  write_array(f, "/meta", H5T_STD_I32LE, H5T_NATIVE_INT32, {2}, ints(2).data());
  EXPECT_EQ(list_sets(f), (std::vector<std::string>{"test", "train"}));
  Dataset d(f, "/test");  // a leading slash is accepted
  EXPECT_EQ(d.info().rows, 10u);
}

TEST(H5Test, AttributesAndStringsRoundTrip) {
  const std::string f = testing::scratch_dir("h5") + "/attrs.h5";
  {
    h5::File h = h5::create_file(f, ExitCode::kCheckpoint);
    h5::write_attr(h.get(), "step", std::int64_t(-42), ExitCode::kCheckpoint);
    h5::write_attr(h.get(), "seed", std::uint64_t(1) << 63, ExitCode::kCheckpoint);
    h5::write_attr(h.get(), "format", "dptrain-checkpoint", ExitCode::kCheckpoint);
    h5::write_attr(h.get(), "format", "replaced", ExitCode::kCheckpoint);
    h5::Group g = h5::create_group(h.get(), "/model/dense0", ExitCode::kCheckpoint);
    h5::write_string(h.get(), "/config", "a = 1\nb = 2\n", ExitCode::kCheckpoint);
    std::vector<float> w(6, 1.5f);
    h5::write_array(g.get(), "weight", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 3}, w.data(),
                    ExitCode::kCheckpoint, {.chunk_rows = 1, .fletcher32 = true});
    h5::flush(h.get(), ExitCode::kCheckpoint);
  }
  h5::File h = h5::open_read(f, ExitCode::kCheckpoint);
  EXPECT_EQ(h5::read_attr_int64(h.get(), "step", ExitCode::kCheckpoint), -42);
  EXPECT_EQ(h5::read_attr_uint64(h.get(), "seed", ExitCode::kCheckpoint), std::uint64_t(1) << 63);
  EXPECT_EQ(h5::read_attr_string(h.get(), "format", ExitCode::kCheckpoint), "replaced");
  EXPECT_EQ(h5::read_string(h.get(), "/config", ExitCode::kCheckpoint), "a = 1\nb = 2\n");
  EXPECT_TRUE(h5::exists(h.get(), "/model/dense0/weight"));
  EXPECT_FALSE(h5::exists(h.get(), "/model/dense1/weight"));
  EXPECT_TRUE(h5::is_group(h.get(), "model"));
  EXPECT_TRUE(h5::is_dataset(h.get(), "/model/dense0/weight"));
  EXPECT_EQ(h5::children(h.get()), (std::vector<std::string>{"config", "model"}));
  h5::DataSet w = h5::open_dataset(h.get(), "/model/dense0/weight", ExitCode::kCheckpoint);
  EXPECT_EQ(h5::shape(w.get()), (std::vector<hsize_t>{2, 3}));
  EXPECT_EQ(h5::chunk_shape(w.get()), (std::vector<hsize_t>{1, 3}));
  EXPECT_EQ(h5::type_name(h5::type_of(w.get()).get()), "float32");
  try {
    h5::read_attr_int64(h.get(), "nope", ExitCode::kCheckpoint);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("attribute 'nope': missing"), std::string::npos) << e.what();
  }
  // Moves leave the source empty, so the id is closed once.
  h5::DataSet moved = std::move(w);
  EXPECT_FALSE(w);
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace dptrain
