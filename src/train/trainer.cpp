// Implements: run_train and the synchronized data-parallel step loop (see
// training_run.hpp): rank 0's queue -> scatter -> forward/loss/backward on
// every rank -> all-reduce SUM of gradients scaled by 1/B_global ->
// identical optimizer step; then whatever the loop policy says is due.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "dptrain/common/test_hooks.hpp"
#include "dptrain/train/rank_memory.hpp"
#include "dptrain/train/trainer.hpp"
#include "train/step_scope.hpp"
#include "train/train_step.hpp"
#include "train/training_run.hpp"

namespace dptrain {
namespace {

// Sets one value of a device arena from the host.
void poke(Backend& be, float* arena, float value) { be.copy_to_device(arena, &value, sizeof value); }

constexpr StepScope::Spec kDataWait{"data", "scatter (waiting for rank 0's data)"};

}  // namespace

ExitCode TrainingRun::run() {
  if (opts_.plan_only) return ExitCode::kOk;
  std::uint64_t step = first_step_;
  if (timeline_.enabled()) timeline_.set_origin_collective(mpi_.world());
  if (step < total_steps_) {
    StepScope scope(watchdog_, timeline_, step, kDataWait);
    input_->start(plan_->slot(step).rows);
  }
  for (; step < total_steps_; ++step) {
    train_one(step);
    after_step(step);
    if (stop_if_voted(step)) return ExitCode::kPreempted;
  }
  finish(step);
  return ExitCode::kOk;
}

void TrainingRun::train_one(std::uint64_t step) {
  Backend& be = *rt_.backend;
  const BatchSlot slot = plan_->slot(step);
  timer_.start(static_cast<std::int64_t>(step));
  const auto t0 = PhaseTimer::Clock::now();
  Shard* shard;
  {
    StepScope scope(watchdog_, timeline_, step, kDataWait);
    shard = &input_->finish();
    if (timeline_.enabled())
      timeline_.add("scatter", timeline_category::kComm, kTimelineCommThread,
                    input_->scatter_began(), input_->scatter_ended(), static_cast<std::int64_t>(step));
    if (step + 1 < total_steps_) input_->start(plan_->slot(step + 1).rows);
  }
  const StepInfo info = step_info(slot);
  if (augmenter_) augmenter_->apply(shard->features, shard->rows, info);
  stop_vote_->start(stop_requested());
  if (test_hooks::nan_in_shard_at(mpi_.rank(), step) && shard->rows > 0) poke(be, shard->features, NAN);
  timer_.lap(Phase::kData);

  const float step_lr = learning_rate(schedule_, optimizer_->step_count());
  model_->set_step(info);
  bool finite;
  {
    StepScope scope(watchdog_, timeline_, step, {"forward/backward/all-reduce", "gradient all-reduce"});
    finite = train_step(be, *rt_.comm, *model_, *optimizer_, loss_, *shard, slot.rows, step_lr,
                        progress_->stats(), step_options_);
  }
  timer_.end_step();  // the step read its non-finite count back: all done
  if (graphs_) {
    const std::string failure = graphs_->take_failure();
    if (!failure.empty())  // one rank: graphs_ exists only then
      std::fprintf(stderr,
                   "dptrain: note: --cuda-graphs on: the step could not be recorded as a graph "
                   "(%s); each step runs as usual\n",
                   failure.c_str());
  }
  if (timeline_.enabled())
    sync_->visit_collectives([&](const char* name, auto started, auto done) {
      timeline_.add(name, timeline_category::kComm, kTimelineCommThread, started, done,
                    static_cast<std::int64_t>(step));
    });
  if (test_hooks::perturb_tower_at(mpi_.rank(), step) && model_->params())
    poke(be, model_->params(), 1234.5f);
  if (finite) lr_ = step_lr;
  else skip_nonfinite_step(step);
  progress_->add_step(
      slot.rows, std::chrono::duration<double, std::milli>(PhaseTimer::Clock::now() - t0).count());
}

StepInfo TrainingRun::step_info(const BatchSlot& slot) const {
  StepInfo info;
  info.seed = opts_.seed;
  info.epoch = slot.epoch;
  info.batch_rows = slot.rows;
  // This rank's rows follow those of lower ranks (no allocation here).
  info.first_row = slot.position + rank_rows(slot.rows, mpi_.size(), mpi_.rank()).first;
  // One rank: its shard is the whole batch, with nothing to sum it with.
  info.replicas = mpi_.size() > 1 ? replica_sum_.get() : nullptr;
  return info;
}

void TrainingRun::skip_nonfinite_step(std::uint64_t step) {
  ++skipped_;
  if (mpi_.rank() == 0)
    std::fprintf(stderr, "dptrain: warning: non-finite gradient at step %llu (%llu of %lld allowed)\n",
                 static_cast<unsigned long long>(step), static_cast<unsigned long long>(skipped_),
                 static_cast<long long>(opts_.skip_nonfinite));
  if (skipped_ > static_cast<std::uint64_t>(opts_.skip_nonfinite)) {
    const BatchSlot slot = plan_->slot(step);
    if (mpi_.rank() == 0)
      report_error("non-finite loss or gradient at step " + std::to_string(step) + " (epoch " +
                       std::to_string(slot.epoch) + "); lower --lr or check the data",
                   0, 1);
    stop_vote_->finish();  // every rank started it
    throw AgreedFailure(ExitCode::kNumeric);
  }
}

void TrainingRun::after_step(std::uint64_t step) {
  const BatchSlot slot = plan_->slot(step);
  if (policy_->log_due(step)) {
    StepScope scope(watchdog_, timeline_, step, {"log", "loss all-reduce", "log"});
    // The last step's gradient norm, when clipping computed one.
    const float norm = opts_.clip_grad_norm > 0 ? optimizer_->last_grad_norm() : -1.0f;
    progress_->report(step, slot.epoch, lr_, norm);
  }
  if (policy_->check_due(step)) {
    StepScope scope(watchdog_, timeline_, step, {"check", "tower consistency check"});
    check_towers(mpi_, *rt_.backend, *model_, step + 1);
  }
  const bool epoch_end = slot.position + slot.rows == plan_->n();
  if (policy_->eval_due(step, epoch_end)) {
    StepScope scope(watchdog_, timeline_, step,
                    {"evaluation", "evaluation", "evaluation", timeline_category::kEval});
    // --shard-params: every rank takes part in the gathers of every batch.
    LayerListener* gathers = opts_.shard_params ? sync_.get() : nullptr;
    const EvalResult r = evaluate(mpi_, *rt_.backend, *rt_.comm, *val_, *model_, loss_, eval_batch_,
                                  cache_bytes_, gathers,
                                  static_cast<std::uint64_t>(opts_.eval_batches));
    progress_->eval(step + 1, epoch_end ? slot.epoch + 1 : slot.epoch, opts_.val_set, loss_, r);
  }
}

bool TrainingRun::stop_if_voted(std::uint64_t step) {
  bool stop;
  {
    StepScope scope(watchdog_, timeline_, step, {"stop-signal agreement", "stop-signal agreement"});
    stop = stop_vote_->finish();
  }
  const bool to_dir = policy_->periodic_checkpoint_due(step) || (stop && policy_->stop_checkpoint_to_dir());
  const bool to_file = stop && policy_->stop_checkpoint_to_file();
  if (to_dir || to_file) {
    // Rank 0 writes; not timed on the other ranks, which wait in agree().
    StepScope scope(watchdog_, timeline_, step, {"checkpoint", nullptr, "checkpoint"});
    if (to_dir) saver_->to_dir(step + 1);
    if (to_file) saver_->to_save_file(step + 1);
  }
  if (!stop) return false;
  if (mpi_.rank() == 0)
    std::fprintf(stderr, "dptrain: stopped by a signal after step %llu%s; exit 75 (requeue)\n",
                 static_cast<unsigned long long>(step + 1),
                 policy_->stop_leaves_checkpoint()
                     ? " with a checkpoint"
                     : " WITHOUT a checkpoint (no --checkpoint-dir or --save)");
  write_timeline();
  return true;
}

void TrainingRun::finish(std::uint64_t end_step) {
  {
    StepScope scope(watchdog_, timeline_, end_step, {"checkpoint", nullptr, "checkpoint"});
    if (policy_->has_save_file) saver_->to_save_file(end_step);
    if (policy_->final_dir_checkpoint_due(end_step, first_step_)) saver_->to_dir(end_step);
  }
  write_timeline();
  if (graphs_)  // one rank: graphs_ exists only then
    std::fprintf(stderr, "dptrain: --cuda-graphs on: %zu graphs recorded, %llu of %llu steps "
                 "replayed\n", graphs_->graphs(),
                 static_cast<unsigned long long>(graphs_->replays()),
                 static_cast<unsigned long long>(end_step - first_step_));
  progress_->summary(end_step - first_step_, rt_.backend->name(), memory_figures());
}

// Collective: the summary's memory figures, each the largest over the ranks.
Progress::MemoryMib TrainingRun::memory_figures() const {
  const Backend& be = *rt_.backend;
  const RankMemory planned = rank_memory(model_->num_params(), optimizer_->state_arrays(),
                                         mpi_.size(), !sync_->state_slices().empty(),
                                         opts_.accumulate > 1, opts_.shard_params,
                                         model_->largest_layer_params(),
                                         opts_.precision == "bf16");
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss in KiB on Linux
  constexpr double kMiB = 1024.0 * 1024.0;
  const double peak_buffers = double(be.peak_buffer_bytes()) / kMiB;
  double figures[6] = {double(planned.params) / kMiB, double(planned.state) / kMiB,
                       be.caps().host_addressable_memory ? 0.0 : peak_buffers,
                       double(usage.ru_maxrss) / 1024.0,
                       double(model_->activation_bytes()) / kMiB, peak_buffers};
  DPT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, figures, 6, MPI_DOUBLE, MPI_MAX, mpi_.world()));
  return {figures[0], figures[1], figures[2], figures[3], figures[4], figures[5]};
}

// Collective: every rank's events into one Chrome trace, written by rank 0.
void TrainingRun::write_timeline() {
  if (!timeline_.enabled()) return;
  agree(mpi_.world(), [&] { timeline_.write_collective(mpi_.world(), opts_.timeline, mpi_.host()); });
  if (mpi_.rank() == 0) {
    std::printf("timeline: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                opts_.timeline.c_str());
    std::fflush(stdout);
  }
}

ExitCode run_train(const Options& opts, MpiSession& mpi) { return TrainingRun(opts, mpi).run(); }

}  // namespace dptrain
