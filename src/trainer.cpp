// Implements: run_train, the synchronized data-parallel step loop:
// rank 0's queue -> scatter -> forward/loss/backward on every rank ->
// all-reduce SUM of gradients scaled by 1/B_global -> identical optimizer
// step. Evaluation at each epoch end, metrics and progress on rank 0.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/buckets.hpp"
#include "dptrain/checkpoint.hpp"
#include "dptrain/metrics.hpp"
#include "dptrain/optimizer.hpp"
#include "dptrain/timeline.hpp"
#include "dptrain/trainer.hpp"
#include "dptrain/watchdog.hpp"
#include "runtime.hpp"
#include "train_state.hpp"

namespace dptrain {
namespace {

OptimizerConfig optimizer_config(const Options& o) {
  OptimizerConfig c;
  c.kind = parse_optimizer(o.optimizer);
  c.momentum = static_cast<float>(o.momentum);
  c.nesterov = o.nesterov;
  c.weight_decay = static_cast<float>(o.weight_decay);
  c.beta1 = static_cast<float>(o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.eps = static_cast<float>(o.eps);
  return c;
}

ShuffleMode shuffle_mode(const Options& o, const SetInfo& info, std::size_t cache_bytes) {
  if (o.shuffle == "none") return ShuffleMode::kNone;
  if (o.shuffle == "full") return ShuffleMode::kFull;
  if (o.shuffle == "block") return ShuffleMode::kBlock;
  const std::uint64_t bytes =
      info.rows * (info.feature_bytes_per_row() + info.label_bytes_per_row());
  return bytes <= cache_bytes ? ShuffleMode::kFull : ShuffleMode::kBlock;
}

// --shuffle-block-rows, or by default whole chunks of the file (a multiple
// of its chunk rows near 1024), so that every block read decompresses each
// chunk it touches once and touches no chunk it does not use.
std::uint64_t block_rows(const Options& o, const SetInfo& info) {
  if (o.shuffle_block_rows > 0) return static_cast<std::uint64_t>(o.shuffle_block_rows);
  constexpr std::uint64_t kTarget = 1024;
  const std::uint64_t chunk = info.chunk_rows;
  if (chunk == 0) return kTarget;
  return std::max<std::uint64_t>(1, (kTarget + chunk / 2) / chunk) * chunk;
}

const char* shuffle_name(ShuffleMode m) {
  return m == ShuffleMode::kNone ? "none" : m == ShuffleMode::kFull ? "full" : "block";
}

void print_eval(const MpiSession& mpi, MetricsWriter& metrics, std::uint64_t step,
                std::uint64_t epoch, const std::string& set, LossKind loss, const EvalResult& r) {
  if (mpi.rank() != 0) return;
  nlohmann::json e = {{"event", "eval"}, {"step", step}, {"epoch", epoch}, {"set", set},
                      {"loss", r.loss}};
  if (loss == LossKind::kXent) {
    e["accuracy"] = r.accuracy;
    std::printf("eval  step %llu epoch %llu %s: loss %.4f accuracy %.4f\n",
                static_cast<unsigned long long>(step), static_cast<unsigned long long>(epoch),
                set.c_str(), r.loss, r.accuracy);
  } else {
    std::printf("eval  step %llu epoch %llu %s: loss %.6f\n", static_cast<unsigned long long>(step),
                static_cast<unsigned long long>(epoch), set.c_str(), r.loss);
  }
  std::fflush(stdout);
  metrics.write(e);
}

// Test hooks (fault-handling tests only): "RANK:STEP" from the environment.
struct TestHook {
  int rank = -1;
  std::uint64_t step = 0;
  explicit TestHook(const char* var) {
    if (const char* v = std::getenv(var)) {
      unsigned long long st = 0;
      if (std::sscanf(v, "%d:%llu", &rank, &st) == 2) step = st;
      else rank = -1;
    }
  }
  bool fires(int r, std::uint64_t s) const { return rank == r && step == s; }
};

// Enough for about 50k steps of a small model; about 40 MB.
constexpr std::size_t kTimelineMaxEvents = 500000;

// Creates and removes path.tmp: Error(kUsage) naming the option and path
// when the file cannot be written there.
void check_writable(const std::string& path, const char* option) {
  const std::string probe = path + ".tmp";
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f)
    throw Error(ExitCode::kUsage, std::string(option) + ": cannot write '" + path + "': " +
                                      std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

// Collective: every rank's events into one Chrome trace, written by rank 0.
void write_timeline(const Options& opts, const MpiSession& mpi, Timeline& timeline) {
  if (!timeline.enabled()) return;
  agree(mpi.world(), [&] { timeline.write_collective(mpi.world(), opts.timeline, mpi.host()); });
  if (mpi.rank() == 0) {
    std::printf("timeline: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                opts.timeline.c_str());
    std::fflush(stdout);
  }
}

// Sets one value of a device arena from the host.
void poke(Backend& be, float* arena, float value) { be.copy_to_device(arena, &value, sizeof value); }

}  // namespace

ExitCode run_train(const Options& opts, MpiSession& mpi) {
  const LossKind loss = parse_loss(opts.loss);
  const std::vector<LayerSpec> layers = parse_model_spec(opts.model);
  const int outputs = spec_output_width(layers);
  const std::size_t cache_bytes = static_cast<std::size_t>(opts.input_cache_mb) << 20;

  install_stop_signal_handlers();
  Runtime rt = make_runtime(opts, mpi);
  Watchdog watchdog(opts.comm_timeout, mpi.rank(), mpi.size());
  // NCCL calls can block on the device where MPI_Abort cannot reach them.
  watchdog.set_on_timeout([&rt] { rt.comm->abort(); });
  Backend& be = *rt.backend;
  Communicator& comm = *rt.comm;
  // --timeline: storage for every event up front (about 80 bytes each);
  // events past it are counted, not kept.
  Timeline timeline;
  if (!opts.timeline.empty()) {
    // Found out now, not after hours of training.
    agree(mpi.world(), [&] {
      if (mpi.rank() == 0) check_writable(opts.timeline, "--timeline");
    });
    timeline.enable(kTimelineMaxEvents);
  }

  DataSet train = open_set(mpi, opts.data, opts.train_set, loss, outputs);
  std::optional<DataSet> val;
  if (!opts.val_set.empty()) val.emplace(open_set(mpi, opts.data, opts.val_set, loss, outputs));
  if (val) {
    agree(mpi.world(), [&] {
      DPT_REQUIRE(val->info.dim == train.info.dim, ExitCode::kData,
                  opts.data + ": /" + opts.val_set + "/features has " +
                      std::to_string(val->info.dim) + " values per sample, /" + opts.train_set +
                      "/features has " + std::to_string(train.info.dim));
    });
  }

  const std::uint64_t batch = static_cast<std::uint64_t>(opts.batch_size);
  const std::uint64_t eval_batch =
      opts.eval_batch_size > 0 ? static_cast<std::uint64_t>(opts.eval_batch_size) : batch;
  const BatchPlan plan(train.info.rows, batch);
  const std::uint64_t total_steps = opts.steps > 0
                                        ? static_cast<std::uint64_t>(opts.steps)
                                        : static_cast<std::uint64_t>(opts.epochs) * plan.steps_per_epoch();
  const int max_rows =
      std::max(max_shard_rows(batch, mpi.size()), max_shard_rows(eval_batch, mpi.size()));

  std::unique_ptr<Model> model;
  agree(mpi.world(), [&] {
    model = std::make_unique<Model>(be, layers, static_cast<int>(train.info.dim), max_rows);
    model->init(opts.seed);
  });
  // Rank 0's weights are the reference: every tower starts bitwise identical.
  comm.broadcast(model->params(), model->num_params() * sizeof(float), 0);
  Optimizer optimizer(be, optimizer_config(opts), model->num_params());
  LrScheduleConfig sched;
  sched.kind = parse_lr_schedule(opts.lr_schedule);
  sched.base_lr = static_cast<float>(opts.lr);
  sched.warmup_steps = opts.warmup_steps;
  sched.total_steps = static_cast<std::int64_t>(total_steps);
  sched.step_size = opts.lr_step_size;
  sched.gamma = static_cast<float>(opts.lr_gamma);
  sched.min_lr = static_cast<float>(opts.min_lr);

  const StartPoint start = restore_state(opts, mpi, rt, *model, optimizer, loss, plan);
  const std::uint64_t first_step = std::min(start.step, total_steps);
  MetricsWriter metrics;
  agree(mpi.world(), [&] {
    // A resumed run appends, so one file holds the whole history.
    if (mpi.rank() == 0 && !opts.metrics.empty()) metrics.open(opts.metrics, start.resumed);
  });

  const ShuffleMode mode = shuffle_mode(opts, train.info, cache_bytes);
  std::unique_ptr<InputQueue> queue;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    InputQueueConfig qc;
    qc.batch_size = batch;
    qc.shuffle.mode = mode;
    qc.shuffle.seed = opts.seed;
    qc.shuffle.block_rows = block_rows(opts, train.info);
    qc.shuffle.window_blocks = static_cast<std::uint64_t>(opts.shuffle_window_blocks);
    qc.first_step = first_step;
    qc.end_step = total_steps;
    qc.capacity = static_cast<std::size_t>(opts.prefetch);
    qc.cache_bytes = cache_bytes;
    qc.timeline = timeline.enabled() ? &timeline : nullptr;
    qc.raw_uint8 = raw_uint8_wire(train.info);
    queue = std::make_unique<InputQueue>(*train.data, qc);
  });

  // Where every rank runs: "host:cpu" or "host:cuda:<gpu>" per rank.
  std::string placement;
  {
    constexpr int kLen = 96;
    char mine[kLen];
    std::snprintf(mine, kLen, "%s:%s", mpi.host().c_str(),
                  rt.device == DeviceKind::kCuda
                      ? ("cuda:" + std::to_string(rt.device_index)).c_str()
                      : "cpu");
    std::vector<char> all(static_cast<std::size_t>(kLen) * mpi.size());
    DPT_MPI_CHECK(MPI_Gather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, 0, mpi.world()));
    for (int r = 0; r < mpi.size() && mpi.rank() == 0; ++r)
      placement += (r ? ", " : "") + std::to_string(r) + "=" + &all[static_cast<std::size_t>(r) * kLen];
  }
  std::string shuffle_text = shuffle_name(mode);
  if (mode == ShuffleMode::kBlock)
    shuffle_text += " (blocks of " + std::to_string(block_rows(opts, train.info)) + " rows, " +
                    std::to_string(opts.shuffle_window_blocks) + " per window)";
  if (mpi.rank() == 0) {
    std::printf(
        "dptrain: ranks %s\n"
        "dptrain: %d rank(s) on %d node(s), %d per node, device %s, %d thread(s)/rank, %s\n"
        "dptrain: GEMM %s\n"
        "dptrain: data %s: /%s %llu x %llu, shuffle %s; model %s (%zu parameters); "
        "batch %llu (shards of %d..%d); %llu steps (%llu per epoch)\n",
        placement.c_str(), mpi.size(), mpi.nodes(), mpi.local_size(), be.name().c_str(), rt.threads,
        mpi.mpi_version().c_str(), be.gemm_library().c_str(), opts.data.c_str(), opts.train_set.c_str(),
        static_cast<unsigned long long>(train.info.rows),
        static_cast<unsigned long long>(train.info.dim), shuffle_text.c_str(), model->spec().c_str(),
        model->num_params(), static_cast<unsigned long long>(batch),
        shard_counts(batch, mpi.size()).back(), shard_counts(batch, mpi.size()).front(),
        static_cast<unsigned long long>(total_steps),
        static_cast<unsigned long long>(plan.steps_per_epoch()));
    std::fflush(stdout);
  }

  // Batch t+1 moves to its shards while batch t computes; gradient buckets
  // are reduced while backward goes on (both moved along between layers).
  InputPipeline input(mpi.world(), be, queue.get(), max_rows, train.info.dim,
                      train.info.label_width, loss, raw_uint8_wire(train.info));
  GradientBuckets buckets(comm, model->grads(),
                          plan_buckets(model->param_layout(), model->num_params(),
                                       static_cast<std::size_t>(opts.bucket_mb * 1048576.0)),
                          &input);
  DeviceBuffer<float> stats(be, 2);  // loss sum and correct count since the last log

  const TestHook nan_hook("DPTRAIN_TEST_NAN_AT"), perturb_hook("DPTRAIN_TEST_PERTURB_AT");
  PhaseTimer timer;
  timer.attach(&timeline);
  // On a GPU the phases are timed on the device (events between phases).
  if (rt.device == DeviceKind::kCuda) timer.attach_device(&be);
  double train_ms = 0.0, interval_ms = 0.0;
  std::uint64_t interval_samples = 0, interval_steps = 0, samples = 0, skipped = 0;
  float lr = 0.0f;
  // Preemption: a rank's SIGTERM/SIGUSR1 is agreed by a non-blocking
  // all-reduce started at the top of a step and completed at its end, so
  // every rank stops after the same step at no cost to the step.
  int stop_flag = 0, any_stop = 0;
  MPI_Request stop_request = MPI_REQUEST_NULL;
  std::uint64_t step = first_step;
  if (timeline.enabled()) timeline.set_origin_collective(mpi.world());
  if (step < total_steps) {
    set_phase("data", step);
    Watchdog::Wait wait(&watchdog, "scatter (waiting for rank 0's data)", step);
    input.start(plan.slot(step).rows);
  }
  for (; step < total_steps; ++step) {
    const BatchSlot slot = plan.slot(step);
    timer.start(static_cast<std::int64_t>(step));
    const auto t0 = PhaseTimer::Clock::now();

    set_phase("data", step);
    Shard* received;
    {
      Watchdog::Wait wait(&watchdog, "scatter (waiting for rank 0's data)", step);
      received = &input.finish();
      if (timeline.enabled())
        timeline.add("scatter", timeline_category::kComm, kTimelineCommThread,
                     input.scatter_began(), input.scatter_ended(), static_cast<std::int64_t>(step));
      if (step + 1 < total_steps) input.start(plan.slot(step + 1).rows);
    }
    stop_flag = stop_requested() ? 1 : 0;
    DPT_MPI_CHECK(MPI_Iallreduce(&stop_flag, &any_stop, 1, MPI_INT, MPI_MAX, mpi.world(),
                                 &stop_request));
    Shard& dev = *received;
    if (nan_hook.fires(mpi.rank(), step) && dev.rows > 0) poke(be, dev.features, NAN);
    timer.lap(Phase::kData);

    const float step_lr = learning_rate(sched, optimizer.step_count());
    set_phase("forward/backward/all-reduce", step);
    bool finite;
    {
      Watchdog::Wait wait(&watchdog, "gradient all-reduce", step);
      finite = train_step(be, comm, *model, optimizer, loss, dev, slot.rows, step_lr, stats.get(),
                          &timer, &buckets);
    }
    timer.end_step();  // the step read its non-finite count back: all done
    if (timeline.enabled()) {
      for (std::size_t b = 0; b < buckets.plan().size(); ++b) {
        char name[48];
        std::snprintf(name, sizeof name, "all-reduce bucket %zu", b);
        timeline.add(name, timeline_category::kComm, kTimelineCommThread, buckets.started_at(b),
                     buckets.done_at(b), static_cast<std::int64_t>(step));
      }
    }
    if (perturb_hook.fires(mpi.rank(), step)) poke(be, model->params(), 1234.5f);
    if (finite) {
      lr = step_lr;
    } else {
      ++skipped;
      if (mpi.rank() == 0)
        std::fprintf(stderr, "dptrain: warning: non-finite gradient at step %llu (%llu of %lld allowed)\n",
                     static_cast<unsigned long long>(step), static_cast<unsigned long long>(skipped),
                     static_cast<long long>(opts.skip_nonfinite));
      if (skipped > static_cast<std::uint64_t>(opts.skip_nonfinite)) {
        if (mpi.rank() == 0)
          report_error("non-finite loss or gradient at step " + std::to_string(step) +
                           " (epoch " + std::to_string(slot.epoch) + "); lower --lr or check the data",
                       0, 1);
        MPI_Wait(&stop_request, MPI_STATUS_IGNORE);  // every rank started it
        throw AgreedFailure(ExitCode::kNumeric);
      }
    }

    const double step_ms =
        std::chrono::duration<double, std::milli>(PhaseTimer::Clock::now() - t0).count();
    train_ms += step_ms;
    interval_ms += step_ms;
    samples += slot.rows;
    interval_samples += slot.rows;
    ++interval_steps;

    const bool epoch_end = slot.position + slot.rows == plan.n();
    const bool last = step + 1 == total_steps;
    if ((step + 1) % static_cast<std::uint64_t>(opts.log_every) == 0 || last) {
      Watchdog::Wait wait(&watchdog, "loss all-reduce", step);
      Timeline::Scope event(timeline, "log", timeline_category::kIo, kTimelineMainThread,
                            static_cast<std::int64_t>(step));
      comm.allreduce_sum(stats.get(), 2);
      float host[2] = {0, 0};
      be.copy_to_host(host, stats.get(), sizeof host);
      be.fill(stats.get(), 0.0f, 2);
      if (mpi.rank() == 0) {
        const double mean_loss = host[0] / static_cast<double>(interval_samples);
        const double sps = interval_samples / (interval_ms / 1000.0);
        nlohmann::json ms = timer.per_step_json(static_cast<double>(interval_steps));
        metrics.write({{"event", "train"}, {"step", step + 1}, {"epoch", slot.epoch},
                       {"loss", mean_loss}, {"lr", lr}, {"samples_per_s", std::round(sps)},
                       {"ms", ms}});
        std::printf("step %llu/%llu epoch %llu loss %.4f lr %.3g %.0f samples/s | ms/step data %.2f "
                    "fwd %.2f bwd %.2f comm %.2f opt %.2f\n",
                    static_cast<unsigned long long>(step + 1),
                    static_cast<unsigned long long>(total_steps),
                    static_cast<unsigned long long>(slot.epoch), mean_loss, lr, sps,
                    ms["data"].get<double>(), ms["forward"].get<double>(),
                    ms["backward"].get<double>(), ms["comm"].get<double>(),
                    ms["optimizer"].get<double>());
        std::fflush(stdout);
      }
      timer.reset();
      interval_ms = 0;
      interval_samples = 0;
      interval_steps = 0;
    }
    if (opts.check_every > 0 && (step + 1) % static_cast<std::uint64_t>(opts.check_every) == 0) {
      Watchdog::Wait wait(&watchdog, "tower consistency check", step);
      check_towers(mpi, be, *model, step + 1);
    }
    if (val && (epoch_end || last)) {
      set_phase("evaluation", step);
      Watchdog::Wait wait(&watchdog, "evaluation", step);
      Timeline::Scope event(timeline, "evaluation", timeline_category::kEval, kTimelineMainThread,
                            static_cast<std::int64_t>(step));
      const EvalResult r = evaluate(rt, mpi, *val, *model, loss, eval_batch, cache_bytes);
      print_eval(mpi, metrics, step + 1, epoch_end ? slot.epoch + 1 : slot.epoch, opts.val_set,
                 loss, r);
    }

    {
      Watchdog::Wait wait(&watchdog, "stop-signal agreement", step);
      DPT_MPI_CHECK(MPI_Wait(&stop_request, MPI_STATUS_IGNORE));
    }
    const bool periodic = opts.checkpoint_every > 0 &&
                          (step + 1) % static_cast<std::uint64_t>(opts.checkpoint_every) == 0;
    set_phase("checkpoint", step);
    if ((periodic || any_stop) && !opts.checkpoint_dir.empty()) {
      Timeline::Scope event(timeline, "checkpoint", timeline_category::kIo, kTimelineMainThread,
                            static_cast<std::int64_t>(step));
      save_state(checkpoint_path(opts.checkpoint_dir, static_cast<std::int64_t>(step + 1)), true,
                 opts, mpi, rt, *model, optimizer, loss, plan, step + 1);
    }
    if (any_stop) {
      if (opts.checkpoint_dir.empty() && !opts.save.empty())
        save_state(opts.save, false, opts, mpi, rt, *model, optimizer, loss, plan, step + 1);
      if (mpi.rank() == 0) {
        std::fprintf(stderr, "dptrain: stopped by a signal after step %llu%s; exit 75 (requeue)\n",
                     static_cast<unsigned long long>(step + 1),
                     opts.checkpoint_dir.empty() && opts.save.empty()
                         ? " WITHOUT a checkpoint (no --checkpoint-dir or --save)"
                         : " with a checkpoint");
      }
      write_timeline(opts, mpi, timeline);
      return ExitCode::kPreempted;
    }
  }

  {
    Timeline::Scope event(timeline, "checkpoint", timeline_category::kIo, kTimelineMainThread,
                          static_cast<std::int64_t>(step));
    if (!opts.save.empty())
      save_state(opts.save, false, opts, mpi, rt, *model, optimizer, loss, plan, step);
    // The end is always checkpointed in --checkpoint-dir (unless the periodic
    // save just wrote this very step).
    if (!opts.checkpoint_dir.empty() && step > first_step &&
        (opts.checkpoint_every == 0 || step % static_cast<std::uint64_t>(opts.checkpoint_every) != 0))
      save_state(checkpoint_path(opts.checkpoint_dir, static_cast<std::int64_t>(step)), true, opts,
                 mpi, rt, *model, optimizer, loss, plan, step);
  }
  write_timeline(opts, mpi, timeline);
  if (mpi.rank() == 0) {
    const double wall_s = train_ms / 1000.0;
    const double sps = wall_s > 0 ? samples / wall_s : 0.0;
    metrics.write({{"event", "summary"}, {"steps", step - first_step}, {"samples", samples},
                   {"wall_s", std::round(wall_s * 1000.0) / 1000.0}, {"samples_per_s", std::round(sps)},
                   {"ranks", mpi.size()}, {"device", be.name()}});
    std::printf("done: %llu steps, %llu samples in %.2f s (%.0f samples/s, %d ranks, %s)\n",
                static_cast<unsigned long long>(step - first_step),
                static_cast<unsigned long long>(samples), wall_s, sps, mpi.size(), be.name().c_str());
    std::fflush(stdout);
  }
  return ExitCode::kOk;
}

}  // namespace dptrain
