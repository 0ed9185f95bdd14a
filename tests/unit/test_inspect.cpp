// Implements: unit tests of `dptrain inspect` (inspect_file, without MPI):
// the checkpoint and data-file summaries hold the facts a user looks for, and
// files that are neither fail with a message naming the file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "app/inspect.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

class InspectTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string inspect(const std::string& file) const {
    std::ostringstream out;
    inspect_file(file, out);
    return out.str();
  }
  std::string dir_ = testing::scratch_dir("inspect");
};

void expect_has(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' not in:\n" << text;
}

CheckpointData small_checkpoint() {
  CheckpointData d;
  d.meta = {"dense:4,relu,dense:2", "xent", 300, 2, 96, 17, 3, "lr = 0.5\nbatch-size = 32\n", "adam", 300};
  d.param_layout = model_layout(parse_model_spec(d.meta.model), Shape{8}).params;
  const std::size_t n = arena_size(d.param_layout);
  d.params.assign(n, 0.125f);
  d.optimizer_state = {{"m", std::vector<float>(n, 0.0f)}, {"v", std::vector<float>(n, 1.0f)}};
  d.has_training_state = true;
  return d;
}

TEST_F(InspectTest, CheckpointSummary) {
  write_checkpoint(path("ck.h5"), small_checkpoint());
  const std::string s = inspect(path("ck.h5"));
  expect_has(s, {"dptrain checkpoint", "dense:4,relu,dense:2", "xent", "step:            300",
                 "epoch 2, epoch_position 96", "seed:            17", "world size:      3",
                 "adam, step 300, state: m v", "dense0", "weight [4, 8]", "bias [4]",
                 "weight [2, 4]", "parameters:      46", "184 B", "lr = 0.5", "batch-size = 32"});
}

// --ranks P: what a rank holds with and without the sharded optimizer
// state (46 parameters, Adam: 368 B of state, a slice of 12 floats on 4).
TEST_F(InspectTest, RanksShowsMemoryPerRank) {
  write_checkpoint(path("ck.h5"), small_checkpoint());
  std::ostringstream out;
  inspect_file(path("ck.h5"), out, 4);
  expect_has(out.str(), {"on 4 rank(s):", "optimizer state 368 B (96 B with --shard-optimizer)",
                         "optimizer state 96 B (slice 1/4 of 368 B)"});
}

// A version 2 checkpoint of a CNN: every layer with its output shape and
// parameter count, from the spec and input_shape.
TEST_F(InspectTest, CnnCheckpointShowsLayerOutputShapes) {
  CheckpointData d = small_checkpoint();
  d.meta.model = "conv:8:3,bn,relu,maxpool:2,res(conv:16:3:2,bn),gap,dense:10";
  d.input_shape = {1, 28, 28};
  const ModelLayout layout = model_layout(parse_model_spec(d.meta.model), Shape{1, 28, 28});
  d.param_layout = layout.params;
  d.buffer_layout = layout.buffers;
  d.params.assign(arena_size(d.param_layout), 0.125f);
  d.buffers.assign(arena_size(d.buffer_layout), 1.0f);
  for (auto& st : d.optimizer_state) st.values.assign(d.params.size(), 0.5f);
  write_checkpoint(path("cnn.h5"), d);
  const std::string s = inspect(path("cnn.h5"));
  expect_has(s, {"input:           [1, 28, 28]", "conv0", "[8, 28, 28]", "80 parameters",
                 "maxpool0", "[8, 14, 14]", "res0", "[16, 7, 7]", "gap0", "[16]",
                 "weight [16, 8, 1, 1]", "res0/proj_bn", "running_mean [16]"});
}

TEST_F(InspectTest, ModelOnlyCheckpoint) {
  h5::File f = h5::create_file(path("m.h5"), ExitCode::kOther);
  std::vector<float> w(6, 0.5f), b(2, 0.0f);
  h5::write_array(f.get(), "/model/dense0/weight", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 3},
                  w.data(), ExitCode::kOther);
  h5::write_array(f.get(), "/model/dense0/bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2}, b.data(),
                  ExitCode::kOther);
  f.reset();
  expect_has(inspect(path("m.h5")), {"model-only", "weight [2, 3]", "parameters:      8"});
}

TEST_F(InspectTest, BadCheckpointIsCheckpointError) {
  write_checkpoint(path("ck.h5"), small_checkpoint());
  {
    h5::File f = h5::open_read_write(path("ck.h5"), ExitCode::kOther);
    h5::write_attr(f.get(), "version", std::int64_t(7), ExitCode::kOther);
  }
  try {
    inspect(path("ck.h5"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    expect_has(e.message(), {"version 7", "ck.h5"});
  }
}

TEST_F(InspectTest, DataFileWithClassLabels) {
  testing::FixtureSpec s;
  s.rows = 100;
  s.shape = {2, 3};
  s.classes = 10;  // (7i + 3) mod 10: each class exactly 10 times
  s.chunk_rows = 16;
  s.int64_labels = true;
  testing::write_fixture(path("d.h5"), s);
  s.set = "test";
  s.rows = 20;
  s.uint8 = true;
  s.int64_labels = false;
  testing::write_fixture(path("d.h5"), s);
  const std::string out = inspect(path("d.h5"));
  expect_has(out, {"data file, 2 sets", "set train: N = 100", "[100, 2, 3] float32", "D = 6",
                   "chunks of 16 rows", "class ids, int64 [100]", "classes:  10",
                   "0: 10  1: 10  2: 10", "9: 10", "set test: N = 20", "uint8", "int32 [20]"});
}

TEST_F(InspectTest, DataFileWithTargets) {
  testing::FixtureSpec s;
  s.rows = 10;
  s.targets = 2;  // i * 0.5 - k for column k
  testing::write_fixture(path("t.h5"), s);
  expect_has(inspect(path("t.h5")),
             {"float targets, float32 [10, 2]", "targets:  min -1, mean 1.75, max 4.5",
              "[0] min 0, mean 2.25, max 4.5", "[1] min -1, mean 1.25, max 3.5"});
}

TEST_F(InspectTest, NeitherCheckpointNorDataFails) {
  {
    h5::File f = h5::create_file(path("other.h5"), ExitCode::kOther);
    std::vector<float> v(4, 1.0f);
    h5::write_array(f.get(), "/stuff/values", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4}, v.data(),
                    ExitCode::kOther);
  }
  try {
    inspect(path("other.h5"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    expect_has(e.message(), {"neither", "other.h5"});
  }
  std::ofstream(path("text.h5")) << "not hdf5";
  try {
    inspect(path("text.h5"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    expect_has(e.message(), {"not an HDF5 file", "text.h5"});
  }
}

}  // namespace
}  // namespace dptrain
