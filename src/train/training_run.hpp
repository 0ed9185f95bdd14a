// Implements: one `dptrain train` job (internal). Construction sets
// everything up, agreed across ranks (training_setup.cpp); run() is the step
// loop (trainer.cpp): for each step get the shard, step, report if due,
// evaluate if due, checkpoint or stop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/checkpoint/train_state.hpp"
#include "dptrain/data/augment.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/input_readers.hpp"
#include "dptrain/data/sample_order.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/data/shared_set.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/parallel/sync_strategy.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/options.hpp"
#include "dptrain/run/runtime.hpp"
#include "dptrain/run/stop_vote.hpp"
#include "dptrain/run/watchdog.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "dptrain/telemetry/timeline.hpp"
#include "train/loop_policy.hpp"
#include "train/progress.hpp"
#include "train/replica_sum.hpp"
#include "train/step_graphs.hpp"
#include "train/train_step.hpp"

namespace dptrain {

// The optimizer's settings from the options (training_setup.cpp).
OptimizerConfig optimizer_config(const Options& o);

class TrainingRun {
 public:
  // Collective: parses, opens and validates the data, builds the model,
  // restores --resume/--init-from state and prints the start-up summary.
  // Throws AgreedFailure (every rank alike) on bad input.
  TrainingRun(const Options& opts, MpiSession& mpi);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Collective: the step loop; kOk at the end, kPreempted after a stop signal.
  ExitCode run();

 private:
  void open_data();
  void build_model();
  void make_input_queue();
  void print_summary() const;
  // --plan-only (memory_plan.cpp): rank 0 prints what a rank would hold.
  void print_memory_plan();
  // Collective: token models' train events carry mfu when every rank's
  // dense peak is known (--peak-tflops, or its GPU's name); rank 0 says
  // which peak, or why there is none.
  void count_model_flops();
  // --cuda-graphs on: the step's graphs where they apply (one rank, one
  // micro-batch, a strategy whose passes run without their events); rank 0
  // says once where they do not.
  void make_step_graphs();

  // One step: the shard, the step itself, the bookkeeping of skipped steps.
  void train_one(std::uint64_t step);
  // A step whose reduced gradients held NaN/Inf was skipped: warn, or end
  // the job with exit 5 once more than --skip-nonfinite were.
  void skip_nonfinite_step(std::uint64_t step);
  // The model's view of this step: seed, epoch, this shard's first global
  // row, the global batch, the replica sum.
  StepInfo step_info(const BatchSlot& slot) const;
  // After a step: report, check, evaluate as the policy says.
  void after_step(std::uint64_t step);
  // Stops after `step` completed steps when a rank asked to: checkpoint, exit.
  bool stop_if_voted(std::uint64_t step);
  void finish(std::uint64_t end_step);
  Progress::MemoryMib memory_figures() const;
  void write_timeline();

  const Options& opts_;
  MpiSession& mpi_;
  const LossKind loss_;
  const std::vector<LayerSpec> layers_;
  const std::size_t cache_bytes_;

  Watchdog watchdog_;  // before rt_: it watches the communicator's set-up too
  Runtime rt_;
  Watchdog::Watching watching_;  // rt_.comm, from after its set-up until before it goes
  Timeline timeline_;
  ReaderGroup readers_;  // who reads the training rows (--input-readers)
  SharedSet train_;
  std::optional<SharedSet> val_;
  std::uint64_t batch_ = 0, eval_batch_ = 0, total_steps_ = 0, first_step_ = 0;
  std::optional<BatchPlan> plan_;
  std::optional<LoopPolicy> policy_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  LrScheduleConfig schedule_;
  StartPoint start_;
  MetricsWriter metrics_;
  ShuffleMode shuffle_ = ShuffleMode::kFull;
  std::unique_ptr<InputQueue> queue_;  // input readers only
  std::unique_ptr<InputPipeline> input_;
  std::unique_ptr<SyncStrategy> sync_;  // how the ranks' gradients become one update
  LayerEvents layer_events_;            // the strategy and the input pipeline listen
  DeviceBuffer<float> accumulated_;     // --accumulate K > 1: the earlier micro-batches' sum
  StepOptions step_options_;
  std::unique_ptr<CommReplicaSum> replica_sum_;  // bn's global statistics
  std::unique_ptr<StepGraphs> graphs_;           // --cuda-graphs on, where they apply
  std::unique_ptr<Augmenter> augmenter_;         // --augment, when given
  std::unique_ptr<StateSaver> saver_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<StopVote> stop_vote_;
  PhaseTimer timer_;
  std::uint64_t skipped_ = 0;
  float lr_ = 0.0f;  // of the last applied step
};

}  // namespace dptrain
