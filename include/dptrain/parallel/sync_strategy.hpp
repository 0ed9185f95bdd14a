// Implements: the parallel-strategy interface (docs/design.md section 1,
// "Parallel strategies"): how the gradients of all ranks become one update
// that leaves every tower alike. The step (src/train/train_step.cpp) calls
// these in one fixed order and never asks which strategy it has:
//   begin_backward -> (the model's passes: the strategy listens to their
//   layer events) -> finish_backward -> update.
// Each strategy is one class in src/parallel/ and one line of
// make_sync_strategy; every collective it makes goes through the
// Communicator. A strategy that keeps parameters in slices (ZeRO-3) gathers
// a unit's parameters in before_forward / before_backward.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/model/layer_events.hpp"
#include "dptrain/model/optimizer.hpp"

namespace dptrain {

class Backend;
class Communicator;
class Model;
class PhaseTimer;
struct Options;

class SyncStrategy : public LayerListener {
 public:
  using Clock = std::chrono::steady_clock;
  ~SyncStrategy() override = default;

  // For the start-up summary and the timeline: "replicated", "sliced optimizer state".
  virtual std::string name() const = 0;

  // The stretch of the parameter arena whose optimizer state this rank
  // keeps and whose update it computes (the whole arena when replicated).
  virtual ArenaRange owned() const = 0;
  // What a checkpoint needs to gather and scatter the optimizer state:
  // P + 1 ascending arena offsets, rank r keeping [slices[r], slices[r+1]);
  // empty when every rank keeps the whole state.
  virtual const std::vector<std::size_t>& state_slices() const = 0;

  // A backward pass is about to run. reduce: its gradients are the step's
  // last (the last micro-batch under --accumulate), so the strategy reduces
  // them as the layers finish; otherwise it lets the pass run untouched.
  // earlier (with reduce): an arena like the gradients, the sum of the
  // earlier micro-batches, added to each part just before its reduction
  // starts (null: nothing added).
  virtual void begin_backward(bool reduce, const float* earlier) = 0;
  // After the reducing backward: completes every reduction it started
  // (only the part its overlap with backward did not hide).
  virtual void finish_backward() = 0;
  // Whether forward and backward may run without this strategy hearing
  // their layer events, its reduction then started after backward (begin_
  // backward, grads_ready(0), finish_backward): a step recorded as a graph
  // (--cuda-graphs). Not where the passes need the events (parameters
  // gathered before each layer).
  virtual bool passes_without_events() const { return false; }
  // After finish_backward: checks the reduced gradients for NaN/Inf and,
  // unless there are any, updates the parameters with `opt` at lr, so that
  // every rank holds the same parameters afterwards. Returns false (and
  // skips the update) when there were; every rank returns the same. Laps
  // the timer's comm and optimizer phases as it goes (timer may be null).
  virtual bool update(Optimizer& opt, float lr, PhaseTimer* timer) = 0;

  // The collectives of the last step, for the timeline: name (e.g.
  // "all-reduce bucket 3"), started, first seen complete.
  using CollectiveVisitor =
      std::function<void(const char* name, Clock::time_point started, Clock::time_point done)>;
  virtual void visit_collectives(const CollectiveVisitor& visit) const = 0;
};

// What a strategy is made over: the step's backend, communicator and model,
// and the gradient bucket size (--bucket-mb in bytes; 0: one bucket).
struct SyncSetup {
  Backend& backend;
  Communicator& comm;
  Model& model;
  std::size_t bucket_bytes = 0;
  std::uint64_t seed = 0;  // --shard-params: the strategy initializes its slice
  int micro_batches = 1;   // --accumulate K
};

// The strategy the options ask for (--shard-optimizer: sliced optimizer
// state; else replicated): the one place that maps options to strategies.
std::unique_ptr<SyncStrategy> make_sync_strategy(const Options& opts, const SyncSetup& setup);

}  // namespace dptrain
