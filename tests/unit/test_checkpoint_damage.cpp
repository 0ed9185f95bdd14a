// Implements: unit tests of damaged and hostile checkpoint files: each case
// (truncated, flipped bits in data or metadata, missing objects, wrong format
// or version, non-finite values, mismatched or absurd shapes) fails with exit
// code 4 and a message naming the file and the problem, never a crash.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "checkpoint_fixtures.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/h5.hpp"

namespace dptrain {
namespace {

using namespace dptrain::testing;
namespace fs = std::filesystem;

TEST_F(CheckpointTest, MissingOrNonHdf5FileFails) {
  expect_ckpt_error([&] { read_checkpoint(path("none.h5")); }, {"no such file", "none.h5"});
  std::ofstream(path("text.h5")) << "hello, not hdf5\n";
  expect_ckpt_error([&] { read_checkpoint(path("text.h5")); }, {"not an HDF5 file", "text.h5"});
}

TEST_F(CheckpointTest, TruncatedFileFails) {
  const std::string p = written();
  fs::resize_file(p, fs::file_size(p) / 2);
  expect_ckpt_error([&] { read_checkpoint(p); }, {p});
  expect_ckpt_error([&] { read_checkpoint(p, true); }, {p});
}

TEST_F(CheckpointTest, FlippedBitFailsChecksum) {
  // Every parameter holds one recognisable bit pattern, so its bytes in the
  // file are the raw chunk data of /model/dense0/weight (the first written).
  CheckpointData d = make_data({16, 8, 3});
  const float mark = std::bit_cast<float>(0x40490FDBu);
  std::fill(d.params.begin(), d.params.end(), mark);
  write_checkpoint(path("flip.h5"), d);
  std::ifstream in(path("flip.h5"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::vector<char> run;
  for (int i = 0; i < 32; ++i) run.insert(run.end(), (const char*)&mark, (const char*)&mark + 4);
  auto at = std::search(bytes.begin(), bytes.end(), run.begin(), run.end());
  ASSERT_NE(at, bytes.end()) << "parameter bytes not found in the file";
  const auto offset = (at - bytes.begin()) + 61;
  std::fstream f(path("flip.h5"), std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(offset);
  f.put(static_cast<char>(bytes[offset] ^ 0x10));
  f.close();
  expect_ckpt_error([&] { read_checkpoint(path("flip.h5")); },
                    {"/model/dense0/weight", "Fletcher32", path("flip.h5")});
}

TEST_F(CheckpointTest, FlippedBitInMetadataFails) {
  // The config text sits in the root object header, which the 1.10 file
  // format checksums: a flipped bit there must not become a different config.
  const std::string p = written();
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto at = bytes.find("lr = 0.001");
  ASSERT_NE(at, std::string::npos);
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(at + 7);
  f.put(static_cast<char>(bytes[at + 7] ^ 0x01));
  f.close();
  expect_ckpt_error([&] { read_checkpoint(p); }, {"checksum", p});
}

TEST_F(CheckpointTest, EveryFlippedBitIsCaughtOrHarmless) {
  // A sweep over the whole file, metadata included: each flip must fail the
  // read or leave the contents exactly as written (free space, padding).
  const std::string p = written();
  const CheckpointData ref = read_checkpoint(p);
  std::ifstream in(p, std::ios::binary);
  const std::string orig((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string q = path("flipped.h5");
  int rejected = 0;
  for (std::size_t off = 0; off < orig.size(); off += 1 + orig.size() / 400) {
    std::string b = orig;
    b[off] = static_cast<char>(b[off] ^ (1 << (off % 8)));
    std::ofstream(q, std::ios::binary | std::ios::trunc) << b;
    try {
      const CheckpointData d = read_checkpoint(q);
      EXPECT_TRUE(bitwise_equal(d.params, ref.params) && d.meta.config == ref.meta.config &&
                  d.meta.model == ref.meta.model && d.meta.step == ref.meta.step &&
                  bitwise_equal(d.optimizer_state[1].values, ref.optimizer_state[1].values))
          << "a flip at byte " << off << " changed what was read without an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 200);
}

TEST_F(CheckpointTest, MissingBiasFails) {
  const std::string p = written();
  edit(p, [](hid_t f) { ASSERT_GE(H5Ldelete(f, "/model/dense1/bias", H5P_DEFAULT), 0); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"/model/dense1/bias", "missing", p});
  expect_ckpt_error([&] { read_checkpoint(p, true); }, {"/model/dense1/bias", "missing"});
}

TEST_F(CheckpointTest, WrongOrMissingFormatFails) {
  const std::string p = written();
  edit(p, [](hid_t f) { h5::write_attr(f, "format", "something-else", ExitCode::kOther); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"not a dptrain checkpoint", "something-else", p});
  expect_ckpt_error([&] { read_checkpoint(p, true); }, {"not a dptrain checkpoint"});
  edit(p, [](hid_t f) { ASSERT_GE(H5Adelete(f, "format"), 0); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"not a dptrain checkpoint", "no format"});
}

TEST_F(CheckpointTest, WrongVersionFails) {
  for (std::int64_t v : {0, 3}) {
    const std::string p = written();
    edit(p, [v](hid_t f) { h5::write_attr(f, "version", v, ExitCode::kOther); });
    const std::string want = "version " + std::to_string(v);
    expect_ckpt_error([&] { read_checkpoint(p); }, {want, p});
    expect_ckpt_error([&] { read_checkpoint(p, true); }, {want});
  }
}

// Version 1 files (MLPs, no input_shape attribute) stay readable: the input
// width comes from dense0's weight.
TEST_F(CheckpointTest, Version1MlpWithoutInputShapeReads) {
  const std::string p = written();
  const CheckpointData v2 = read_checkpoint(p);
  ASSERT_FALSE(v2.input_shape.empty());
  edit(p, [](hid_t f) {
    h5::write_attr(f, "version", std::int64_t(1), ExitCode::kOther);
    ASSERT_GE(H5Adelete(f, "input_shape"), 0);
  });
  const CheckpointData v1 = read_checkpoint(p);
  EXPECT_EQ(v1.param_layout, v2.param_layout);
  EXPECT_EQ(v1.params, v2.params);
  EXPECT_EQ(v1.input_shape, v2.input_shape);
}

TEST_F(CheckpointTest, BadInputShapeFails) {
  const std::string p = written();
  edit(p, [](hid_t f) { h5::write_attr_int64s(f, "input_shape", {0}, ExitCode::kOther); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"input_shape", p});
  edit(p, [](hid_t f) { h5::write_attr_int64s(f, "input_shape", {1, 3, 4}, ExitCode::kOther); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"shape [5, 6] does not match [5, 12]", "input_shape [1, 3, 4]", p});
}

TEST_F(CheckpointTest, MissingAttributeFailsFullRead) {
  const std::string p = written();
  edit(p, [](hid_t f) { ASSERT_GE(H5Adelete(f, "epoch_position"), 0); });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"epoch_position", "missing"});
  EXPECT_NO_THROW(read_checkpoint(p, true));  // --init-from needs only /model
}

TEST_F(CheckpointTest, OversizedStringAttributeIsRefused) {
  const std::string p = written();
  edit(p, [](hid_t f) {
    h5::write_attr_fixed(f, "config", std::string((17u << 20), 'x'), ExitCode::kOther);
  });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"attribute 'config'", "16 MiB"});
}

TEST_F(CheckpointTest, NonFiniteWeightFails) {
  const std::string p = written();
  edit(p, [](hid_t f) {
    std::vector<float> w(3 * 5, 0.25f);
    w[1 * 5 + 2] = std::nanf("");
    replace_array(f, "/model/dense1/weight", {3, 5}, w);
  });
  expect_ckpt_error([&] { read_checkpoint(p, true); }, {"/model/dense1/weight", "NaN", "[1, 2]", p});
  edit(p, [](hid_t f) {
    std::vector<float> v(30, 0.0f);
    v[7] = -std::numeric_limits<float>::infinity();
    replace_array(f, "/optimizer/m/dense0/weight", {5, 6}, v);
    replace_array(f, "/model/dense1/weight", {3, 5}, std::vector<float>(15, 0.5f));
  });
  expect_ckpt_error([&] { read_checkpoint(p); }, {"/optimizer/m/dense0/weight", "-Inf", "[1, 1]"});
}

TEST_F(CheckpointTest, MismatchedShapesFail) {
  const std::string a = written("a.h5");
  edit(a, [](hid_t f) { replace_array(f, "/model/dense0/bias", {4}, std::vector<float>(4, 0)); });
  expect_ckpt_error([&] { read_checkpoint(a, true); }, {"/model/dense0/bias", "shape [4] does not match [5]", "model attribute"});

  const std::string b = written("b.h5");
  edit(b, [](hid_t f) { replace_array(f, "/model/dense1/weight", {3, 4}, std::vector<float>(12, 0)); });
  expect_ckpt_error([&] { read_checkpoint(b, true); }, {"/model/dense1/weight", "shape [3, 4] does not match [3, 5]"});

  const std::string c = written("c.h5");
  edit(c, [](hid_t f) { replace_array(f, "/optimizer/v/dense1/bias", {2}, std::vector<float>(2, 0)); });
  expect_ckpt_error([&] { read_checkpoint(c); }, {"/optimizer/v/dense1", "does not match [3]"});
  EXPECT_NO_THROW(read_checkpoint(c, true));  // the model itself is fine

  const std::string d = written("d.h5");
  edit(d, [](hid_t f) { replace_array(f, "/model/dense1/bias", {3, 1}, std::vector<float>(3, 0)); });
  expect_ckpt_error([&] { read_checkpoint(d, true); }, {"/model/dense1/bias", "rank"});

  const std::string e = written("e.h5");
  edit(e, [](hid_t f) { h5::write_attr(f, "model", "dense:5,relu,dense:4", ExitCode::kOther); });
  expect_ckpt_error([&] { read_checkpoint(e); }, {"dense:5,relu,dense:4", "does not match"});
  // The version 1 path (no input_shape) checks the spec against the stored
  // MLP as before.
  edit(a, [](hid_t f) { ASSERT_GE(H5Adelete(f, "input_shape"), 0); });
  expect_ckpt_error([&] { read_checkpoint(a, true); }, {"/model/dense0", "bias has 4 values"});
}

TEST_F(CheckpointTest, LayerGapFails) {
  const auto layout = layout_of({4, 3, 2});
  write_raw_model(path("gap.h5"), layout, std::vector<float>(arena_size(layout), 0.5f));
  edit(path("gap.h5"), [](hid_t f) {
    ASSERT_GE(H5Lmove(f, "/model/dense1", f, "/model/dense2", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_ckpt_error([&] { read_checkpoint(path("gap.h5"), true); }, {"/model/dense2", "dense1 is missing"});
}

TEST_F(CheckpointTest, HugeShapeIsRefusedBeforeAllocating) {
  // Chunked and barely written (one row each): the file is small, the
  // declared shape is 2^40 floats. The reader must say so instead of
  // allocating 4 TiB.
  {
    h5::File f = h5::create_file(path("huge.h5"), ExitCode::kOther);
    h5::CreateOptions co;
    co.chunk_rows = 1;
    const hsize_t n = hsize_t(1) << 20;
    h5::DataSet w = h5::create_dataset(f.get(), "/model/dense0/weight", H5T_IEEE_F32LE, {n, n},
                                       ExitCode::kOther, co);
    h5::DataSet b = h5::create_dataset(f.get(), "/model/dense0/bias", H5T_IEEE_F32LE, {n},
                                       ExitCode::kOther, co);
    const std::vector<float> row(n, 0.5f);
    h5::write_rows(w.get(), H5T_NATIVE_FLOAT, 0, 1, row.data(), ExitCode::kOther);
    h5::write_rows(b.get(), H5T_NATIVE_FLOAT, 0, 1, row.data(), ExitCode::kOther);
  }
  expect_ckpt_error([&] { read_checkpoint(path("huge.h5"), true); }, {"2^34"});
}

TEST_F(CheckpointTest, ShapeWithNothingStoredIsRefused) {
  // Never written: HDF5 would hand back fill values for a shape the file
  // does not hold, whatever its size.
  {
    h5::File f = h5::create_file(path("empty.h5"), ExitCode::kOther);
    h5::CreateOptions co;
    co.chunk_rows = 1;
    h5::create_dataset(f.get(), "/model/dense0/weight", H5T_IEEE_F32LE, {4, 3}, ExitCode::kOther, co);
    h5::create_dataset(f.get(), "/model/dense0/bias", H5T_IEEE_F32LE, {4}, ExitCode::kOther, co);
  }
  expect_ckpt_error([&] { read_checkpoint(path("empty.h5"), true); },
                    {"/model/dense0/weight", "no data stored"});
}

}  // namespace
}  // namespace dptrain
