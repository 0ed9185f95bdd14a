// Implements: setting up a training run (see training_run.hpp): the data,
// the model and its starting state, the input queue, and the start-up
// summary. Every step that can fail on some ranks is agreed first.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/model/model_flops.hpp"
#include "dptrain/run/control_plane.hpp"
#include "dptrain/run/thread_binding.hpp"
#include "dptrain/telemetry/device_peaks.hpp"
#include "dptrain/train/rank_memory.hpp"
#include "train/training_run.hpp"

namespace dptrain {
namespace {

// --timeline keeps up to this many events a rank (about 40 MB), enough for
// about 50k steps of a small model; later ones are counted, not kept.
constexpr std::size_t kTimelineMaxEvents = 500000;

}  // namespace

OptimizerConfig optimizer_config(const Options& o) {
  OptimizerConfig c;
  c.kind = parse_optimizer(o.optimizer);
  c.momentum = static_cast<float>(o.momentum);
  c.nesterov = o.nesterov;
  c.weight_decay = static_cast<float>(o.weight_decay);
  c.beta1 = static_cast<float>(o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.eps = static_cast<float>(o.eps);
  c.clip_grad_norm = static_cast<float>(o.clip_grad_norm);
  c.decay_all = parse_decay_all(o.weight_decay_params);
  return c;
}

namespace {

LrScheduleConfig schedule_config(const Options& o, std::uint64_t total_steps) {
  LrScheduleConfig s;
  s.kind = parse_lr_schedule(o.lr_schedule);
  s.base_lr = static_cast<float>(o.lr);
  s.warmup_steps = o.warmup_steps;
  s.total_steps = static_cast<std::int64_t>(total_steps);
  s.step_size = o.lr_step_size;
  s.gamma = static_cast<float>(o.lr_gamma);
  s.min_lr = static_cast<float>(o.min_lr);
  return s;
}

ShuffleMode shuffle_mode(const Options& o, const SetInfo& info, std::size_t cache_bytes) {
  const std::uint64_t bytes =
      info.rows * (info.feature_bytes_per_row() + info.label_bytes_per_row());
  return parse_shuffle(o.shuffle, bytes <= cache_bytes);
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

// main() held the stop signals and started their thread before MPI started (again here in
// case MPI_Init unblocked them): a SIGTERM during a slow start-up is seen.
Runtime start_runtime(const Options& opts, const MpiSession& mpi, Watchdog& watchdog) {
  start_stop_signal_thread();
  Runtime rt = make_runtime(opts, mpi, &watchdog);
  // make_runtime's agreements passed: every rank takes the signals.
  if (mpi.rank() == 0) announce_stop_signal_handlers();
  return rt;
}

LoopPolicy loop_policy(const Options& o, std::uint64_t total_steps) {
  LoopPolicy p;
  p.total_steps = total_steps;
  p.log_every = static_cast<std::uint64_t>(std::max<std::int64_t>(1, o.log_every));
  // --shard-params: each rank holds another slice, there are no towers to compare.
  p.check_every = o.shard_params ? 0 : static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.check_every));
  p.checkpoint_every = static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.checkpoint_every));
  p.eval_every = static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.eval_every));
  p.has_val_set = !o.val_set.empty();
  p.has_checkpoint_dir = !o.checkpoint_dir.empty();
  p.has_save_file = !o.save.empty();
  return p;
}

}  // namespace

TrainingRun::TrainingRun(const Options& opts, MpiSession& mpi)
    : opts_(opts),
      mpi_(mpi),
      loss_(parse_loss(opts.loss)),
      layers_(parse_model_spec(opts.model)),
      cache_bytes_(static_cast<std::size_t>(opts.input_cache_mb) << 20),
      watchdog_(opts.comm_timeout, mpi.rank(), mpi.size()),
      rt_(start_runtime(opts, mpi, watchdog_)),
      watching_(&watchdog_, rt_.comm.get()),
      readers_(mpi, parse_reader_mode(opts.input_readers)) {
  if (!opts_.timeline.empty()) {
    // Found out now, not after hours of training.
    agree(mpi_.world(), [&] {
      if (mpi_.rank() == 0) check_writable(opts_.timeline, "--timeline");
    });
    timeline_.enable(kTimelineMaxEvents);
  }
  if (opts_.plan_only) {  // run() then returns at once
    open_data();
    print_memory_plan();
    return;
  }
  open_data();
  build_model();
  policy_ = loop_policy(opts_, total_steps_);
  agree(mpi_.world(), [&] {
    // A resumed run appends, so one file holds the whole history.
    if (mpi_.rank() == 0 && !opts_.metrics.empty()) metrics_.open(opts_.metrics, start_.resumed);
  });
  make_input_queue();
  print_summary();

  Backend& be = *rt_.backend;
  // Batch t+1 moves to its shards while batch t computes, and the strategy
  // reduces gradients while backward goes on: both listen to the model's
  // layer events and move their communication along between layers.
  input_ = std::make_unique<InputPipeline>(readers_.comm(), be, queue_.get(),
                                           max_shard_rows(batch_, mpi_.size()),
                                           train_.info.dim, train_.info.label_width, label_type(loss_),
                                           feature_wire(train_.info), readers_.shards());
  layer_events_ = LayerEvents{sync_.get(), input_.get()};
  replica_sum_ = std::make_unique<CommReplicaSum>(*rt_.comm);
  // (--shard-params sums the micro-batches in the strategy.)
  if (opts_.accumulate > 1 && model_->grads())
    accumulated_ = DeviceBuffer<float>(be, model_->num_params());
  step_options_.sync = sync_.get();
  step_options_.events = &layer_events_;
  step_options_.timer = &timer_;
  step_options_.replicas = replica_sum_.get();
  step_options_.micro_batches = static_cast<int>(opts_.accumulate);
  step_options_.accumulated = accumulated_.get();
  make_step_graphs();
  const AugmentSpec augment = parse_augment(opts_.augment);
  agree(mpi_.world(), [&] {
    DPT_REQUIRE(mpi_.rank() != 0 || !augment.any() || !train_.info.tokens(), ExitCode::kUsage,
                "--augment transforms images; " + opts_.data + ": /" + opts_.train_set +
                    " is a token set");
  });
  if (augment.any())
    agree(mpi_.world(), [&] {
      augmenter_ = std::make_unique<Augmenter>(augment, model_->input_shape(), be);
    });
  saver_ = std::make_unique<StateSaver>(opts_, mpi_, rt_, *model_, *optimizer_, loss_, *plan_,
                                        sync_->state_slices());
  progress_ = std::make_unique<Progress>(mpi_, be, *rt_.comm, metrics_, timer_, total_steps_,
                                         loss_terms_per_sample(loss_, model_->output_shape()));
  count_model_flops();
  stop_vote_ = std::make_unique<StopVote>(mpi_.world());
  timer_.attach(&timeline_);
  // Where the device runs ahead of the host, phases are timed on the device
  // (markers between phases).
  if (be.caps().device_clock) timer_.attach_device(&be);
}

void TrainingRun::open_data() {
  const int outputs = spec_output_width(layers_);
  // Evaluation stays rank 0's (validated once, read once); training rows
  // come from every reader.
  train_ = open_set(mpi_, opts_.data, opts_.train_set, label_type(loss_), outputs, readers_.reader());
  if (!opts_.val_set.empty()) {
    val_.emplace(open_set(mpi_, opts_.data, opts_.val_set, label_type(loss_), outputs));
    agree(mpi_.world(), [&] {
      DPT_REQUIRE(val_->info.vocab_size == train_.info.vocab_size, ExitCode::kData,
                  opts_.data + ": /" + opts_.val_set + " and /" + opts_.train_set +
                      " differ in vocab_size (" + std::to_string(val_->info.vocab_size) + " and " +
                      std::to_string(train_.info.vocab_size) + ")");
      DPT_REQUIRE(sample_shape(val_->info) == sample_shape(train_.info), ExitCode::kData,
                  opts_.data + ": /" + opts_.val_set + "/features has samples of " +
                      sample_shape(val_->info).to_string() + ", /" + opts_.train_set +
                      "/features of " + sample_shape(train_.info).to_string());
    });
  }
  batch_ = static_cast<std::uint64_t>(opts_.batch_size);
  // By default evaluation runs in batches of the micro-batch (--accumulate),
  // so that it needs no more activation memory than training does.
  const auto micro = static_cast<std::uint64_t>(opts_.accumulate);
  eval_batch_ = opts_.eval_batch_size > 0 ? static_cast<std::uint64_t>(opts_.eval_batch_size)
                                          : (batch_ + micro - 1) / micro;
  plan_.emplace(train_.info.rows, batch_);
  total_steps_ = opts_.steps > 0 ? static_cast<std::uint64_t>(opts_.steps)
                                 : static_cast<std::uint64_t>(opts_.epochs) * plan_->steps_per_epoch();
}

void TrainingRun::build_model() {
  // Activations for one micro-batch of the largest shard (--accumulate).
  const int micro = static_cast<int>(opts_.accumulate);
  const int micro_rows = (max_shard_rows(batch_, mpi_.size()) + micro - 1) / micro;
  const int max_rows = std::max(micro_rows, max_shard_rows(eval_batch_, mpi_.size()));
  check_model_fits(mpi_, layers_, train_.info, class_labels(loss_));
  agree(mpi_.world(), [&] {
    model_ = std::make_unique<Model>(
        *rt_.backend, layers_, sample_shape(train_.info), max_rows, model_vocab(train_.info),
        parse_recompute(opts_.recompute),
        opts_.shard_params ? ModelStorage::kShardedParams : ModelStorage::kAllocated,
        logits_precision(opts_.precision, loss_));
    model_->init(opts_.seed);
  });
  // Rank 0's weights are the reference: every tower starts bitwise identical.
  // (--shard-params: each rank initializes its own slice from the seed.)
  if (model_->params())
    rt_.comm->broadcast(model_->params(), model_->num_params() * sizeof(float), 0);
  OptimizerConfig oc = optimizer_config(opts_);
  if (!oc.decay_all) oc.decay_ranges = matrices_decay_ranges(model_->param_layout());
  agree(mpi_.world(), [&] {
    sync_ = make_sync_strategy(opts_, {*rt_.backend, *rt_.comm, *model_,
                                       static_cast<std::size_t>(opts_.bucket_mb * 1048576.0),
                                       opts_.seed, static_cast<int>(opts_.accumulate)});
  });
  optimizer_ = std::make_unique<Optimizer>(*rt_.backend, oc, model_->num_params(), sync_->owned());
  schedule_ = schedule_config(opts_, total_steps_);
  start_ = restore_state(opts_, mpi_, rt_, *model_, *optimizer_, loss_, *plan_,
                         sync_->state_slices());
  first_step_ = std::min(start_.step, total_steps_);
}

void TrainingRun::make_input_queue() {
  shuffle_ = shuffle_mode(opts_, train_.info, cache_bytes_);
  agree(mpi_.world(), [&] {
    if (!readers_.reader()) return;
    InputQueueConfig qc;
    qc.batch_size = batch_;
    qc.shuffle.mode = shuffle_;
    qc.shuffle.seed = opts_.seed;
    qc.shuffle.block_rows = block_rows(opts_, train_.info);
    qc.shuffle.window_blocks = static_cast<std::uint64_t>(opts_.shuffle_window_blocks);
    qc.first_step = first_step_;
    qc.end_step = total_steps_;
    qc.capacity = static_cast<std::size_t>(opts_.prefetch);
    qc.cache_bytes = cache_bytes_;
    qc.timeline = timeline_.enabled() ? &timeline_ : nullptr;
    qc.raw_features = true;  // they travel as stored (feature_wire)
    if (readers_.mode() != ReaderMode::kRank0) qc.group = readers_.shards();
    queue_ = std::make_unique<InputQueue>(*train_.data, qc);
  });
}

void TrainingRun::print_summary() const {
  const Backend& be = *rt_.backend;
  // Where every rank runs: "host/local rank:cpu" or "host/local rank:cuda:<gpu>".
  const std::vector<std::string> places = gather_strings(
      mpi_.world(), mpi_.host() + "/" + std::to_string(mpi_.local_rank()) + ":" + be.placement());
  const std::string binding =
      be.name() == "cpu" ? thread_binding_warning(mpi_.world(), rt_.threads) : "";
  if (mpi_.rank() != 0) return;
  std::string placement;
  for (std::size_t r = 0; r < places.size(); ++r)
    placement += (r ? ", " : "") + std::to_string(r) + "=" + places[r];
  std::string shuffle_text = shuffle_name(shuffle_);
  if (shuffle_ == ShuffleMode::kBlock)
    shuffle_text += " (blocks of " + std::to_string(block_rows(opts_, train_.info)) + " rows, " +
                    std::to_string(opts_.shuffle_window_blocks) + " per window)";
  const std::vector<int> shards = shard_counts(batch_, mpi_.size());
  std::printf(
      "dptrain: ranks %s\n"
      "dptrain: %d rank(s) on %d node(s), %d per node, device %s, %d thread(s)/rank, %s\n"
      "dptrain: GEMM %s\n"
      "dptrain: data %s: /%s %llu x %llu, shuffle %s, input readers %s (%d); model %s "
      "(%zu parameters); batch %llu (shards of %d..%d); %llu steps (%llu per epoch)\n",
      placement.c_str(), mpi_.size(), mpi_.nodes(), mpi_.local_size(), be.name().c_str(),
      rt_.threads, mpi_.mpi_version().c_str(), be.gemm_library().c_str(), opts_.data.c_str(),
      opts_.train_set.c_str(), static_cast<unsigned long long>(train_.info.rows),
      static_cast<unsigned long long>(train_.info.dim), shuffle_text.c_str(),
      reader_mode_name(readers_.mode()), readers_.readers(), model_->spec().c_str(), model_->num_params(), static_cast<unsigned long long>(batch_),
      shards.back(), shards.front(), static_cast<unsigned long long>(total_steps_),
      static_cast<unsigned long long>(plan_->steps_per_epoch()));
  if (opts_.accumulate > 1)
    std::printf("dptrain: --accumulate %lld: each shard runs as micro-batches of up to %d rows\n",
                static_cast<long long>(opts_.accumulate),
                (shards.front() + static_cast<int>(opts_.accumulate) - 1) /
                    static_cast<int>(opts_.accumulate));
  RankMemory mem = rank_memory(model_->num_params(), optimizer_->state_arrays(), mpi_.size(),
                               !sync_->state_slices().empty(), opts_.accumulate > 1,
                               opts_.shard_params, model_->largest_layer_params(),
                               opts_.precision == "bf16");
  mem.params_bf16 = model_->params_bf16_bytes();
  mem.activations = model_->activation_bytes();
  mem.largest_activation = model_->largest_activation_bytes();
  mem.activation_rows = model_->max_rows();
  mem.recompute = model_->recompute() == Recompute::kBlocks;
  mem.kept = model_->activation_plan(model_->max_rows(), model_->recompute()).kept;
  mem.kept_other = model_->activation_plan(
      model_->max_rows(), mem.recompute ? Recompute::kNone : Recompute::kBlocks).kept;
  std::printf("dptrain: memory per rank: %s\n", describe(mem).c_str());
  if (const std::string impl = model_->implementations(); !impl.empty())
    std::printf("dptrain: %s\n", impl.c_str());
  if (!binding.empty()) std::printf("dptrain: WARNING: %s\n", binding.c_str());
  std::fflush(stdout);
}

void TrainingRun::make_step_graphs() {
  if (opts_.cuda_graphs != "on") return;
  std::string why;
  if (mpi_.size() > 1)
    why = "a graph holds one rank's step, and this job has " + std::to_string(mpi_.size()) +
          " ranks";
  else if (opts_.accumulate > 1)
    why = "--accumulate runs a step as micro-batches";
  else if (!sync_->passes_without_events())
    why = "the " + sync_->name() + " strategy works between the layers of a pass";
  if (why.empty()) {
    graphs_ = std::make_unique<StepGraphs>(*rt_.backend);
    step_options_.graphs = graphs_.get();
  } else if (mpi_.rank() == 0) {
    std::fprintf(stderr, "dptrain: note: --cuda-graphs on: %s; each step runs as usual\n",
                 why.c_str());
  }
}

void TrainingRun::count_model_flops() {
  if (!train_.info.tokens()) return;  // 6 N counts a token's products, not a CNN's
  const Backend& be = *rt_.backend;
  const Precision precision = parse_precision(opts_.precision);
  const double peak = opts_.peak_tflops > 0 ? opts_.peak_tflops
                                            : dense_peak_tflops(be.device_name(), precision);
  // The sum of the ranks' peaks, and how many ranks know none.
  double peaks[2] = {peak * 1e12, peak > 0 ? 0.0 : 1.0};
  rt_.comm->allreduce_host_sum(peaks, 2);
  const int tokens = model_->output_positions();
  const ModelFlops flops = model_flops(*model_, tokens);
  if (peaks[1] == 0.0) progress_->count_flops(flops.per_token() * tokens, peaks[0]);
  if (mpi_.rank() != 0) return;
  std::string peak_text = describe_peak(be.device_name(), precision, opts_.peak_tflops);
  if (peaks[1] != 0.0 && peak > 0)
    peak_text = "no mfu: " + std::to_string(static_cast<long long>(peaks[1])) +
                " rank(s) know no dense peak (--peak-tflops names one)";
  std::printf("dptrain: model FLOPs %.4g M per token (6 N + 12 L T D); %s%s\n",
              flops.per_token() * 1e-6, peaks[1] == 0.0 ? "mfu against " : "", peak_text.c_str());
  std::fflush(stdout);
}

}  // namespace dptrain
