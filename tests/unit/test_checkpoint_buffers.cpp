// Implements: unit tests of the checkpoint's buffer arena (non-trained
// state such as running statistics) on hand-made layouts: written as
// /model/<layer>/<name> and listed in the /model attribute `buffers`, read
// back bitwise, checked against the model attribute, refused when damaged
// or inconsistent.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint_fixtures.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/h5.hpp"

namespace dptrain {
namespace {

using namespace dptrain::testing;

// make_data() plus buffers of two layers, ranks 1 and 3. No spec gives
// these buffers, so the model attribute is left out.
CheckpointData with_buffers() {
  CheckpointData d = make_data();
  d.meta.model.clear();
  d.buffer_layout = {{"bn0", "running_mean", {5}, 0, 5},
                     {"bn0", "running_var", {5}, 5, 5},
                     {"stats1", "window", {2, 3, 4}, 10, 24}};
  d.buffers.resize(34);
  for (std::size_t i = 0; i < d.buffers.size(); ++i) d.buffers[i] = 0.5f * float(i) - 3.0f;
  d.buffers[0] = -0.0f;
  return d;
}

TEST_F(CheckpointTest, BuffersRoundTripBitwiseAndAreListed) {
  const CheckpointData in = with_buffers();
  write_checkpoint(path("b.h5"), in);
  for (bool model_only : {false, true}) {
    const CheckpointData out = read_checkpoint(path("b.h5"), model_only);
    EXPECT_EQ(out.buffer_layout, in.buffer_layout);
    EXPECT_TRUE(bitwise_equal(out.buffers, in.buffers));
    EXPECT_TRUE(bitwise_equal(out.params, in.params));
    EXPECT_NO_THROW(check_layout(out, in.param_layout, in.buffer_layout, path("b.h5")));
  }
  h5::File f = h5::open_read(path("b.h5"), ExitCode::kOther);
  h5::Group model = h5::open_group(f.get(), "/model", ExitCode::kOther);
  EXPECT_EQ(h5::read_attr_string(model.get(), "buffers", ExitCode::kOther),
            "bn0/running_mean,bn0/running_var,stats1/window");
  h5::DataSet w = h5::open_dataset(f.get(), "/model/stats1/window", ExitCode::kOther);
  EXPECT_EQ(h5::shape(w.get()), (std::vector<hsize_t>{2, 3, 4}));
  // Buffers are not trained: the optimizer holds none.
  EXPECT_FALSE(h5::exists(f.get(), "/optimizer/m/bn0"));

  // A file without buffers has no such attribute (version 1 MLPs stay as they were).
  write_checkpoint(path("plain.h5"), make_data());
  h5::File g = h5::open_read(path("plain.h5"), ExitCode::kOther);
  EXPECT_FALSE(h5::has_attr(h5::open_group(g.get(), "/model", ExitCode::kOther).get(), "buffers"));
}

TEST_F(CheckpointTest, BuffersMustMatchTheModelAndTheSpec) {
  const CheckpointData in = with_buffers();
  write_checkpoint(path("b.h5"), in);
  const CheckpointData out = read_checkpoint(path("b.h5"));
  auto other = in.buffer_layout;
  other[2].shape = {2, 12};
  expect_ckpt_error([&] { check_layout(out, in.param_layout, other, "x.h5"); },
                    {"/model/stats1/window", "[2, 3, 4]", "[2, 12]", "x.h5"});
  other.pop_back();
  expect_ckpt_error([&] { check_layout(out, in.param_layout, other, "x.h5"); },
                    {"1 stats layers with buffers", "the model has 0"});

  // dense:5,relu,dense:3 gives no buffers: a file claiming both is inconsistent.
  CheckpointData spec = with_buffers();
  spec.meta.model = "dense:5,relu,dense:3";
  write_checkpoint(path("s.h5"), spec);
  expect_ckpt_error([&] { read_checkpoint(path("s.h5"), true); },
                    {"dense:5,relu,dense:3", "does not match"});
}

TEST_F(CheckpointTest, DamagedBuffersFail) {
  write_checkpoint(path("b.h5"), with_buffers());
  edit(path("b.h5"),
       [](hid_t f) { ASSERT_GE(H5Ldelete(f, "/model/bn0/running_var", H5P_DEFAULT), 0); });
  expect_ckpt_error([&] { read_checkpoint(path("b.h5"), true); },
                    {"/model/bn0/running_var", "missing"});

  write_checkpoint(path("n.h5"), with_buffers());
  edit(path("n.h5"), [](hid_t f) {
    std::vector<float> v(5, 1.0f);
    v[3] = std::nanf("");
    replace_array(f, "/model/bn0/running_mean", {5}, v);
  });
  expect_ckpt_error([&] { read_checkpoint(path("n.h5")); },
                    {"/model/bn0/running_mean", "NaN", "[3]"});

  write_checkpoint(path("e.h5"), with_buffers());
  edit(path("e.h5"), [](hid_t f) {
    h5::Group model = h5::open_group(f, "/model", ExitCode::kOther);
    h5::write_attr_fixed(model.get(), "buffers", "bn0/running_mean,window", ExitCode::kOther);
  });
  expect_ckpt_error([&] { read_checkpoint(path("e.h5")); }, {"bad entry 'window'"});
}

TEST_F(CheckpointTest, MisshapedBuffersAreNotWritten) {
  CheckpointData d = with_buffers();
  d.buffers.pop_back();
  expect_ckpt_error([&] { write_checkpoint(path("x.h5"), d); }, {"buffer values"});
  d = with_buffers();
  d.buffer_layout[0].layer = "dense0";
  d.buffer_layout[0].name = "weight";
  expect_ckpt_error([&] { write_checkpoint(path("x.h5"), d); },
                    {"two tensors named dense0/weight"});
  d = with_buffers();
  d.buffer_layout[1].offset = 4;
  expect_ckpt_error([&] { write_checkpoint(path("x.h5"), d); },
                    {"bn0/running_var", "arena offset"});
}

}  // namespace
}  // namespace dptrain
