// Implements: shared pieces of the checkpoint unit tests: parameter layouts
// like Model builds, a full checkpoint whose values all differ, a fixture with a
// scratch directory, and helpers that damage files the way disks and other
// tools do.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "test_paths.hpp"

namespace dptrain::testing {

// dims {in, h, ..., out} -> "dense:h,relu,...,relu,dense:out".
inline std::string spec_of(const std::vector<int>& dims) {
  std::string spec = "dense:" + std::to_string(dims[1]);
  for (std::size_t i = 2; i < dims.size(); ++i) spec += ",relu,dense:" + std::to_string(dims[i]);
  return spec;
}

// dims {in, h, ..., out} -> the parameter layout Model builds.
inline std::vector<ParamInfo> layout_of(const std::vector<int>& dims) {
  return model_layout(parse_model_spec(spec_of(dims)), Shape{dims[0]}).params;
}

inline CheckpointData make_data(const std::vector<int>& dims = {6, 5, 3}) {
  CheckpointData d;
  d.meta.model = spec_of(dims);
  d.meta.loss = "xent";
  d.meta.step = 1234;
  d.meta.epoch = 3;
  d.meta.epoch_position = 640;
  d.meta.seed = 0xFEDCBA9876543210ull;  // above INT64_MAX: stored unsigned
  d.meta.world_size = 4;
  d.meta.config = "model = x\nlr = 0.001\n";
  d.meta.optimizer = "adam";
  d.meta.optimizer_step = 1234;
  d.input_shape = {std::size_t(dims[0])};
  d.param_layout = layout_of(dims);
  const std::size_t n = arena_size(d.param_layout);
  d.params.resize(n);
  for (std::size_t j = 0; j < n; ++j) d.params[j] = 0.001f * float(j) - 0.3f;
  d.params[0] = -0.0f;  // bitwise equality must keep the sign of zero
  d.params[1] = std::numeric_limits<float>::denorm_min();
  d.params[2] = std::numeric_limits<float>::max();
  d.optimizer_state.push_back({"m", std::vector<float>(n)});
  d.optimizer_state.push_back({"v", std::vector<float>(n)});
  for (std::size_t j = 0; j < n; ++j) {
    d.optimizer_state[0].values[j] = 1e-4f * float(j);
    d.optimizer_state[1].values[j] = 1.0f + 1e-5f * float(j);
  }
  d.has_training_state = true;
  return d;
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // A valid checkpoint at path(name), for tests that then damage it.
  std::string written(const std::string& name = "ck.h5") const {
    write_checkpoint(path(name), make_data());
    return path(name);
  }
  std::string dir_ = scratch_dir("checkpoint");
};

// fn must throw Error(kCheckpoint) whose message holds every part.
inline void expect_ckpt_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one with '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint) << e.message();
    for (const auto& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos) << "'" << p << "' not in: " << e.message();
  }
}

// Edits an existing file with the h5 helpers (the damage a test inflicts).
inline void edit(const std::string& file, const std::function<void(hid_t)>& fn) {
  h5::File f = h5::open_read_write(file, ExitCode::kOther);
  fn(f.get());
}

inline void replace_array(hid_t f, const std::string& name, const std::vector<hsize_t>& dims,
                   const std::vector<float>& values) {
  ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0);
  h5::write_array(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, values.data(), ExitCode::kOther);
}

// /model/<layer>/<tensor> with the bare HDF5 C API and no attributes, the
// way h5py or a converter from another framework writes them.
inline void write_raw_model(const std::string& file, const std::vector<ParamInfo>& layout,
                     const std::vector<float>& arena) {
  hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t model = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const ParamInfo& t = layout[i];
    if (i == 0 || layout[i - 1].layer != t.layer)
      H5Gclose(H5Gcreate2(model, t.layer.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t ds = H5Dcreate2(model, t.path().c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT,
                          H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, arena.data() + t.offset);
    H5Dclose(ds);
    H5Sclose(space);
  }
  H5Gclose(model);
  H5Fclose(f);
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace dptrain::testing
