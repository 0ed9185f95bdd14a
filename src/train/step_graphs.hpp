// Implements: --cuda-graphs (docs/design.md, "The step as a CUDA graph"):
// the forward, loss and backward of a step recorded once per shard buffer
// and shape (Backend::record) and replayed as one launch at every later
// step with the same key, so the host queues one graph where it queued
// every kernel and library call (internal to the step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "dptrain/backends/backend.hpp"

namespace dptrain {

// What a recorded pass holds as values: where it reads the shard and
// writes the loss, its rows and the loss scale. A step that differs in any
// of them is another graph.
struct StepGraphKey {
  const void* features = nullptr;
  const void* labels = nullptr;
  const void* targets = nullptr;
  const void* stats = nullptr;
  int rows = 0;
  float scale = 0.0f;
  auto tied() const { return std::tie(features, labels, targets, stats, rows, scale); }
  bool operator<(const StepGraphKey& o) const { return tied() < o.tied(); }
};

class StepGraphs {
 public:
  // At most this many graphs (each shard buffer, full and last batch).
  static constexpr std::size_t kMaxGraphs = 8;
  // At most this many keys remembered as seen once (a key that varies every
  // step must not grow the set for ever).
  static constexpr std::size_t kMaxSeen = 64;

  explicit StepGraphs(Backend& be) : be_(be) {}

  // Runs `pass` for `key` as a graph and returns true, or returns false
  // and leaves `pass` to the caller: at a key's first step (which makes
  // the layers' plans and workspaces, so that its recording allocates
  // nothing), past kMaxGraphs, and once a recording failed (failure()).
  // The pass is recorded at its key's second step and replayed from then
  // on; the caller stages the step first (Model::stage_step).
  bool run(const StepGraphKey& key, const std::function<void()>& pass);

  // False once a recording failed: every later step runs as usual.
  bool active() const { return failure_.empty(); }
  // Why the recording failed (empty while active), once: the next call
  // returns it empty, so the caller reports it one time.
  std::string take_failure();
  std::size_t graphs() const { return graphs_.size(); }
  std::uint64_t replays() const { return replays_; }

 private:
  Backend& be_;
  std::map<StepGraphKey, std::unique_ptr<Backend::RecordedWork>> graphs_;
  std::set<StepGraphKey> seen_;  // keys that ran once, as usual
  std::string failure_;
  bool failure_taken_ = false;
  std::uint64_t replays_ = 0;
};

}  // namespace dptrain
