// Implements: the docs/design.md section 4 checkpoint file: atomic writes by rank
// 0, validated reads, and the directory logic behind --checkpoint-dir,
// --keep-checkpoints and --resume auto.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_spec.hpp"

namespace dptrain {

struct CheckpointMeta {
  std::string model;  // spec string, e.g. "dense:256,relu,dense:10"
  std::string loss;   // "xent" or "mse"
  std::int64_t step = 0, epoch = 0, epoch_position = 0;
  std::uint64_t seed = 0;
  std::int64_t world_size = 1;
  std::string config;  // the resolved options, INI text
  std::string optimizer;           // "sgd", "adam", "adamw" ("" if no state)
  std::int64_t optimizer_step = 0; // optimizer step count (Adam bias correction)
};

// Host copy of everything a checkpoint holds. Arrays are arena-shaped: the
// same layouts as Model::params() and Model::buffers(), each tensor stored
// as /model/<layer>/<name>.
struct CheckpointData {
  CheckpointMeta meta;
  // The model's per-sample input shape ({784}, {1, 28, 28}); stored as the
  // root attribute input_shape since version 2. Empty when unknown (a
  // /model-only file); version 1 files read it from dense0's weight.
  std::vector<std::size_t> input_shape;
  // A language model's vocabulary (its input is token ids {T}): the root
  // attribute vocab_size; 0 when the input is features.
  std::int64_t vocab_size = 0;
  std::vector<ParamInfo> param_layout;   // every parameter tensor, in arena order
  std::vector<float> params;             // arena_size(param_layout) values
  // Writing only, when params is empty: fills one parameter tensor, called
  // once per tensor in arena order before any optimizer state's fetch
  // (parameters kept in slices, --shard-params).
  std::function<void(const ParamInfo&, float*)> params_fetch;
  std::vector<ParamInfo> buffer_layout;  // non-trained tensors (running statistics)
  std::vector<float> buffers;            // arena_size(buffer_layout) values
  struct State {
    std::string name;             // "m", "v", "velocity"
    std::vector<float> values;    // arena-shaped like params
    // Writing only, when values is empty: fills one tensor's values, called
    // once per tensor in arena order (an optimizer state kept in slices, gathered
    // tensor by tensor so that no rank holds all of it).
    std::function<void(const ParamInfo&, float*)> fetch;
  };
  std::vector<State> optimizer_state;
  bool has_training_state = false;  // false for a /model-only file
};

// Writes NAME.tmp, flushes, fsyncs, renames to NAME and fsyncs the directory.
// A crash at any point leaves no partial file under NAME. Throws
// Error(kCheckpoint) naming the path on failure.
void write_checkpoint(const std::string& path, const CheckpointData& data);

// Reads and validates (format, version, shapes against each other and
// against the model attribute, finite values, checksummed data).
// model_only: read /model and attributes that exist, accept a file with only
// /model (for --init-from). The tensors to read: those the model attribute's
// spec gives for input_shape (version 2); else `expect` (the layouts of the
// model a /model-only file is loaded into, e.g. one written by PyTorch);
// else the version 1 MLP groups /model/dense<i>/{weight,bias} and the
// buffers that the /model attribute `buffers` lists. Throws
// Error(kCheckpoint) naming the path and what is wrong.
CheckpointData read_checkpoint(const std::string& path, bool model_only = false,
                               const ModelLayout* expect = nullptr);

// The parameter and optimizer-state arrays of a checkpoint opened by
// open_checkpoint, read on demand one tensor at a time, so that a run whose
// state is kept in slices never holds a whole array (it keeps the file open).
class CheckpointTensors {
 public:
  virtual ~CheckpointTensors() = default;
  // Tensor p of array `array` (0: the /model parameters, 1 + i: optimizer
  // state i) into out (p.count floats), checked as read_checkpoint checks it
  // (finite values, checksummed data); Error(kCheckpoint) naming the path.
  virtual void read(std::size_t array, const ParamInfo& p, float* out) = 0;
};

struct OpenedCheckpoint {
  // As read_checkpoint returns it, except that params and every optimizer
  // state's values are empty: only their shapes have been checked.
  CheckpointData data;
  std::unique_ptr<CheckpointTensors> tensors;
};
OpenedCheckpoint open_checkpoint(const std::string& path, bool model_only = false,
                                 const ModelLayout* expect = nullptr);

// Every check of read_checkpoint, reading the arrays one tensor at a time
// (the memory of the largest tensor, not of the model).
void verify_checkpoint(const std::string& path);

// Checks a checkpoint's /model layout against a model's parameter and
// buffer layouts; Error(kCheckpoint) naming the first mismatching tensor.
void check_layout(const CheckpointData& data, const std::vector<ParamInfo>& params,
                  const std::vector<ParamInfo>& buffers, const std::string& path);

// "<dir>/ckpt-<step, 9 digits>.h5"
std::string checkpoint_path(const std::string& dir, std::int64_t step);
// Final-named checkpoints in dir, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// Newest checkpoint in dir that reads and validates; reports each rejected
// newer one on stderr. Returns "" when none is valid.
std::string find_resume_checkpoint(const std::string& dir);
// Removes all but the newest `keep` checkpoints (keep <= 0: keep all), and
// stale *.tmp files.
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace dptrain
