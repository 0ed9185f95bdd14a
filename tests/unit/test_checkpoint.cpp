// Implements: unit tests of the checkpoint file (docs/design.md section 4) when
// all goes well: bitwise round trips, the stored layout h5py sees, atomic
// writes and the slow-write test hook, /model-only files from other tools,
// layout checks, and the directory logic behind --resume auto and
// --keep-checkpoints.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "checkpoint_fixtures.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/h5.hpp"

namespace dptrain {
namespace {

using namespace dptrain::testing;
namespace fs = std::filesystem;

TEST_F(CheckpointTest, RoundTripIsBitwiseEqual) {
  const CheckpointData in = make_data({7, 9, 4, 3});
  write_checkpoint(path("rt.h5"), in);
  const CheckpointData out = read_checkpoint(path("rt.h5"));
  EXPECT_TRUE(out.has_training_state);
  EXPECT_EQ(out.meta.model, in.meta.model);
  EXPECT_EQ(out.meta.loss, in.meta.loss);
  EXPECT_EQ(out.meta.step, in.meta.step);
  EXPECT_EQ(out.meta.epoch, in.meta.epoch);
  EXPECT_EQ(out.meta.epoch_position, in.meta.epoch_position);
  EXPECT_EQ(out.meta.seed, in.meta.seed);
  EXPECT_EQ(out.meta.world_size, in.meta.world_size);
  EXPECT_EQ(out.meta.config, in.meta.config);
  EXPECT_EQ(out.meta.optimizer, in.meta.optimizer);
  EXPECT_EQ(out.meta.optimizer_step, in.meta.optimizer_step);
  ASSERT_EQ(out.param_layout.size(), in.param_layout.size());
  for (std::size_t i = 0; i < in.param_layout.size(); ++i) {
    EXPECT_EQ(out.param_layout[i].layer, in.param_layout[i].layer);
    EXPECT_EQ(out.param_layout[i].name, in.param_layout[i].name);
    EXPECT_EQ(out.param_layout[i].shape, in.param_layout[i].shape);
    EXPECT_EQ(out.param_layout[i].offset, in.param_layout[i].offset);
    EXPECT_EQ(out.param_layout[i].count, in.param_layout[i].count);
  }
  EXPECT_TRUE(out.buffer_layout.empty());
  EXPECT_TRUE(out.buffers.empty());
  EXPECT_TRUE(bitwise_equal(out.params, in.params));
  ASSERT_EQ(out.optimizer_state.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(out.optimizer_state[s].name, in.optimizer_state[s].name);
    EXPECT_TRUE(bitwise_equal(out.optimizer_state[s].values, in.optimizer_state[s].values));
  }
  EXPECT_NO_THROW(check_layout(out, in.param_layout, {}, path("rt.h5")));

  const CheckpointData model = read_checkpoint(path("rt.h5"), true);
  EXPECT_FALSE(model.has_training_state);
  EXPECT_TRUE(model.optimizer_state.empty());
  EXPECT_TRUE(bitwise_equal(model.params, in.params));
  EXPECT_EQ(model.meta.model, in.meta.model);
}

TEST_F(CheckpointTest, StateOrderAndStatelessOptimizerRoundTrip) {
  CheckpointData in = make_data();
  std::swap(in.optimizer_state[0], in.optimizer_state[1]);  // "v" before "m": kept as written
  write_checkpoint(path("a.h5"), in);
  const CheckpointData a = read_checkpoint(path("a.h5"));
  ASSERT_EQ(a.optimizer_state.size(), 2u);
  EXPECT_EQ(a.optimizer_state[0].name, "v");
  EXPECT_EQ(a.optimizer_state[1].name, "m");

  in.meta.optimizer = "sgd";  // no momentum: no state arrays at all
  in.optimizer_state.clear();
  write_checkpoint(path("b.h5"), in);
  const CheckpointData b = read_checkpoint(path("b.h5"));
  EXPECT_TRUE(b.has_training_state);
  EXPECT_EQ(b.meta.optimizer, "sgd");
  EXPECT_TRUE(b.optimizer_state.empty());
}

TEST_F(CheckpointTest, StoredLayoutIsTorchLinearWithAttributes) {
  const std::string p = written();
  h5::File f = h5::open_read(p, ExitCode::kOther);
  EXPECT_EQ(h5::read_attr_string(f.get(), "format", ExitCode::kOther), "dptrain-checkpoint");
  EXPECT_EQ(h5::read_attr_int64(f.get(), "version", ExitCode::kOther), 2);
  h5::DataSet w = h5::open_dataset(f.get(), "/model/dense0/weight", ExitCode::kOther);
  EXPECT_EQ(h5::shape(w.get()), (std::vector<hsize_t>{5, 6}));  // [out, in]
  EXPECT_EQ(h5::type_name(h5::type_of(w.get()).get()), "float32");
  EXPECT_FALSE(h5::chunk_shape(w.get()).empty());  // chunked, so Fletcher32 applies
  h5::DataSet b = h5::open_dataset(f.get(), "/model/dense1/bias", ExitCode::kOther);
  EXPECT_EQ(h5::shape(b.get()), (std::vector<hsize_t>{3}));
  EXPECT_TRUE(h5::is_dataset(f.get(), "/optimizer/v/dense1/weight"));
  h5::Group rng = h5::open_group(f.get(), "/rng", ExitCode::kOther);
  EXPECT_EQ(h5::read_attr_string(rng.get(), "algorithm", ExitCode::kOther), "splitmix64");
}

TEST_F(CheckpointTest, WriteIsAtomic) {
  const std::string p = written();
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  CheckpointData d = make_data();
  d.meta.step = 99;
  write_checkpoint(p, d);  // replaces the old file in one rename
  EXPECT_EQ(read_checkpoint(p).meta.step, 99);
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  const std::string bad = path("no/such/dir/ck.h5");
  expect_ckpt_error([&] { write_checkpoint(bad, d); }, {"cannot write checkpoint", bad});
  EXPECT_FALSE(fs::exists(bad + ".tmp"));
  EXPECT_FALSE(fs::exists(bad));

  d.params.pop_back();  // inconsistent data is refused before any file is made
  expect_ckpt_error([&] { write_checkpoint(path("x.h5"), d); }, {"parameters"});
  EXPECT_FALSE(fs::exists(path("x.h5.tmp")));
}

TEST_F(CheckpointTest, SlowCheckpointHookLeavesOnlyTmpMidWrite) {
  ::setenv("DPTRAIN_TEST_SLOW_CHECKPOINT_MS", "600", 1);
  const std::string p = path("slow.h5");
  std::thread writer([&] { write_checkpoint(p, make_data()); });
  bool saw_tmp_only = false;
  for (int i = 0; i < 50 && !saw_tmp_only; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    saw_tmp_only = fs::exists(p + ".tmp") && !fs::exists(p);
  }
  writer.join();
  ::unsetenv("DPTRAIN_TEST_SLOW_CHECKPOINT_MS");
  EXPECT_TRUE(saw_tmp_only);
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(CheckpointTest, ModelOnlyFileFromOtherToolsLoadsOnlyAsModel) {
  const auto layout = layout_of({8, 4, 2});
  std::vector<float> arena(arena_size(layout));
  for (std::size_t j = 0; j < arena.size(); ++j) arena[j] = 0.01f * float(j) - 0.2f;
  write_raw_model(path("raw.h5"), layout, arena);
  const CheckpointData d = read_checkpoint(path("raw.h5"), true);
  EXPECT_FALSE(d.has_training_state);
  ASSERT_EQ(d.param_layout.size(), 4u);  // dense0 and dense1, a weight and a bias each
  EXPECT_EQ(d.param_layout[0].path(), "dense0/weight");
  EXPECT_EQ(d.param_layout[0].shape, (std::vector<std::size_t>{4, 8}));
  EXPECT_EQ(d.param_layout[2].path(), "dense1/weight");
  EXPECT_EQ(d.param_layout[2].shape, (std::vector<std::size_t>{2, 4}));
  EXPECT_TRUE(bitwise_equal(d.params, arena));
  EXPECT_NO_THROW(check_layout(d, layout, {}, path("raw.h5")));
  expect_ckpt_error([&] { read_checkpoint(path("raw.h5")); }, {"not a dptrain checkpoint", "raw.h5"});
}

TEST_F(CheckpointTest, CheckLayoutNamesFirstMismatch) {
  const CheckpointData d = make_data({6, 5, 3});
  expect_ckpt_error([&] { check_layout(d, layout_of({6, 5, 4}), {}, "x.h5"); },
                    {"/model/dense1", "[3, 5]", "[4, 5]", "x.h5"});
  expect_ckpt_error([&] { check_layout(d, layout_of({7, 5, 3}), {}, "x.h5"); }, {"/model/dense0"});
  expect_ckpt_error([&] { check_layout(d, layout_of({6, 5, 3, 2}), {}, "x.h5"); },
                    {"2 dense layers", "the model has 3"});
}

TEST_F(CheckpointTest, PathsAndListingNewestFirst) {
  EXPECT_EQ(checkpoint_path("run", 42), "run/ckpt-000000042.h5");
  EXPECT_EQ(checkpoint_path("run/", 7), "run/ckpt-000000007.h5");
  for (const char* n : {"ckpt-000000001.h5", "ckpt-000000010.h5", "ckpt-000000002.h5",
                        "ckpt-1000000000.h5", "ckpt-000000011.h5.tmp", "other.h5", "ckpt-x1.h5",
                        "ckpt-.h5"})
    std::ofstream(path(n)) << "x";
  fs::create_directory(path("ckpt-000000099.h5"));  // not a regular file
  const auto list = list_checkpoints(dir_);
  EXPECT_EQ(list, (std::vector<std::string>{path("ckpt-1000000000.h5"), path("ckpt-000000010.h5"),
                                            path("ckpt-000000002.h5"), path("ckpt-000000001.h5")}));
  EXPECT_TRUE(list_checkpoints(path("missing-dir")).empty());
}

TEST_F(CheckpointTest, ResumeFallsBackPastTruncatedNewest) {
  CheckpointData d = make_data();
  d.meta.step = 1;
  write_checkpoint(checkpoint_path(dir_, 1), d);
  d.meta.step = 2;
  write_checkpoint(checkpoint_path(dir_, 2), d);
  EXPECT_EQ(find_resume_checkpoint(dir_), checkpoint_path(dir_, 2));

  const std::string newest = checkpoint_path(dir_, 2);
  fs::resize_file(newest, fs::file_size(newest) / 3);
  ::testing::internal::CaptureStderr();
  const std::string chosen = find_resume_checkpoint(dir_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(chosen, checkpoint_path(dir_, 1));
  EXPECT_NE(err.find("dptrain: warning: skipping checkpoint " + newest + ": "), std::string::npos)
      << err;

  fs::resize_file(checkpoint_path(dir_, 1), 100);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(find_resume_checkpoint(dir_), "");
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(find_resume_checkpoint(path("empty-or-missing")), "");
}

TEST_F(CheckpointTest, PruneKeepsNewestAndRemovesStaleTmp) {
  for (int s : {1, 2, 3, 4, 5}) std::ofstream(checkpoint_path(dir_, s)) << "x";
  std::ofstream(path("ckpt-000000006.h5.tmp")) << "half";
  std::ofstream(path("notes.txt")) << "keep me";
  prune_checkpoints(dir_, 0);  // keep all checkpoints, still drop the stale tmp
  EXPECT_EQ(list_checkpoints(dir_).size(), 5u);
  EXPECT_FALSE(fs::exists(path("ckpt-000000006.h5.tmp")));
  std::ofstream(path("ckpt-000000007.h5.tmp")) << "half";
  prune_checkpoints(dir_, 2);
  EXPECT_EQ(list_checkpoints(dir_),
            (std::vector<std::string>{checkpoint_path(dir_, 5), checkpoint_path(dir_, 4)}));
  EXPECT_FALSE(fs::exists(path("ckpt-000000007.h5.tmp")));
  EXPECT_TRUE(fs::exists(path("notes.txt")));
}

}  // namespace
}  // namespace dptrain
