// Implements: the constants and small helpers that the checkpoint writer
// (checkpoint.cpp) and reader (checkpoint_read.cpp, checkpoint_file_reader.cpp)
// share: the docs/design.md section 4 format name and version, the limits a
// reader enforces, and one way of raising Error(kCheckpoint) that names the
// file.
#pragma once

#include <cstdint>
#include <string>

#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"

namespace dptrain::ckpt {

inline constexpr ExitCode kCode = ExitCode::kCheckpoint;
inline constexpr const char* kFormat = "dptrain-checkpoint";
// Version 2 adds the root attribute input_shape (and layers beyond dense);
// version 1 files (MLPs) stay readable.
inline constexpr std::int64_t kVersion = 2;
inline constexpr const char* kInputShapeAttr = "input_shape";
inline constexpr const char* kVocabAttr = "vocab_size";  // token models only
// Far beyond any model we train (64 GiB of float32), small enough that a
// hostile shape is refused before it turns into an allocation.
inline constexpr std::uint64_t kMaxFloats = std::uint64_t(1) << 34;
inline constexpr int kMaxLayers = 4096;
inline constexpr std::size_t kMaxSpecLayers = 4 * kMaxLayers;  // activations and the like too
inline constexpr std::size_t kMaxTensorRank = 5;  // conv3d weight [out, in, k, k, k]
inline constexpr std::size_t kMaxStates = 8;
inline constexpr hsize_t kMaxAttrBytes = hsize_t(16) << 20;  // a config text is a few KiB

// The path travels in Error::where, so `what` need not repeat it.
[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw Error(kCode, what, path);
}

// h5 helpers put "<file>: " in front of their messages; drop the repeat.
inline std::string strip_prefix(const std::string& what, const std::string& file) {
  const std::string prefix = file + ": ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

// Version 1 files, and /model files other tools write for an MLP, hold the
// parameters as /model/dense<i>/{weight,bias}, i = 0, 1, ...
inline std::string layer_group(std::size_t i) { return "dense" + std::to_string(i); }
// The /model attribute listing buffer tensors ("bn0/running_mean,...") in
// arena order; absent when the model has none.
inline constexpr const char* kBuffersAttr = "buffers";

}  // namespace dptrain::ckpt
