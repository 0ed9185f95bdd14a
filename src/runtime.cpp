// Implements: the set-up shared by the commands (see runtime.hpp).
#include "runtime.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <cstdio>
#include <cstring>
#include <vector>
#include <thread>

#include "cuda/cuda_backend.hpp"
#include "dptrain/buckets.hpp"
#include "dptrain/error.hpp"
#include "dptrain/metrics.hpp"
#include "dptrain/optimizer.hpp"

namespace dptrain {

LossKind parse_loss(const std::string& name) {
  if (name == "xent") return LossKind::kXent;
  if (name == "mse") return LossKind::kMse;
  throw Error(ExitCode::kUsage, "--loss '" + name + "' is not one of: xent, mse");
}

const char* loss_name(LossKind loss) { return loss == LossKind::kXent ? "xent" : "mse"; }

namespace {

Precision parse_precision(const std::string& p) {
  if (p == "tf32") return Precision::kTf32;
  if (p == "bf16") return Precision::kBf16;
  return Precision::kFp32;
}

// Two ranks of a node on one GPU would halve its speed and can deadlock
// NCCL: refuse to start, naming both ranks. UUIDs are exchanged within the
// node (a UUID is 40 characters: "GPU-xxxxxxxx-...").
void check_distinct_gpus(const MpiSession& mpi, int device) {
  constexpr int kLen = 64;
  char mine[kLen] = {};
  const std::string uuid = cuda_device_uuid(device);
  std::snprintf(mine, kLen, "%s", uuid.c_str());
  std::vector<char> all(static_cast<std::size_t>(kLen) * mpi.size());
  DPT_MPI_CHECK(MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, mpi.world()));
  std::vector<char> hosts(static_cast<std::size_t>(MPI_MAX_PROCESSOR_NAME) * mpi.size());
  std::vector<char> host(MPI_MAX_PROCESSOR_NAME, 0);
  std::snprintf(host.data(), host.size(), "%s", mpi.host().c_str());
  DPT_MPI_CHECK(MPI_Allgather(host.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(),
                              MPI_MAX_PROCESSOR_NAME, MPI_CHAR, mpi.world()));
  agree(mpi.world(), [&] {
    if (uuid.empty()) return;
    for (int r = 0; r < mpi.size(); ++r) {
      if (r == mpi.rank()) continue;
      const char* other = &all[static_cast<std::size_t>(r) * kLen];
      const char* other_host = &hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME];
      if (r < mpi.rank() && uuid == other && mpi.host() == other_host)
        throw Error(ExitCode::kUsage,
                    "ranks " + std::to_string(r) + " and " + std::to_string(mpi.rank()) +
                        " on " + mpi.host() + " share GPU " + uuid +
                        "; start one rank per GPU (e.g. srun --gpus-per-task=1, or fewer ranks)");
    }
  });
}

}  // namespace

Runtime make_runtime(const Options& opts, const MpiSession& mpi) {
  Runtime rt;
  int gpus = 0;
  agree(mpi.world(), [&] { gpus = cuda_device_count(); });
  // auto means cuda only when every rank has a GPU, so all towers run alike.
  int min_gpus = gpus;
  DPT_MPI_CHECK(MPI_Allreduce(&gpus, &min_gpus, 1, MPI_INT, MPI_MIN, mpi.world()));
  if (opts.device == "cuda" || (opts.device == "auto" && min_gpus > 0)) {
    rt.device = DeviceKind::kCuda;
    rt.device_index = gpus > 0 ? mpi.local_rank() % gpus : 0;
  }
  if (opts.threads > 0) {
    rt.threads = static_cast<int>(opts.threads);
  } else {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rt.threads = std::max(1, static_cast<int>(cores) / std::max(1, mpi.local_size()));
  }
  agree(mpi.world(), [&] {
    BackendOptions bo;
    bo.threads = rt.threads;
    bo.device_index = rt.device_index;
    bo.precision = parse_precision(opts.precision);
    rt.backend = make_backend(rt.device, bo);
  });
  if (rt.device == DeviceKind::kCuda) check_distinct_gpus(mpi, rt.device_index);
  agree(mpi.world(), [&] {
    rt.comm = rt.device == DeviceKind::kCuda ? make_nccl_communicator(mpi.world(), *rt.backend)
                                             : make_mpi_communicator(mpi.world());
  });
  return rt;
}

namespace {

// What every rank needs to know about a set that only rank 0 opened.
struct SetShape {
  std::uint64_t rows, dim, label_width, chunk_rows;
  std::int32_t feature_type, label_type;
  std::int64_t max_label;
};

}  // namespace

DataSet open_set(const MpiSession& mpi, const std::string& file, const std::string& set,
                 LossKind loss, int outputs) {
  DataSet ds;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    ds.data = std::make_unique<Dataset>(file, set);
    const SetInfo& info = ds.data->info();
    const std::string where = file + ": /" + set + "/labels";
    if (loss == LossKind::kXent) {
      DPT_REQUIRE(info.label_type == LabelType::kClass, ExitCode::kData,
                  where + " holds float targets [N, K]; --loss xent needs integer class ids [N]");
    } else {
      DPT_REQUIRE(info.label_type == LabelType::kTarget, ExitCode::kData,
                  where + " holds integer class ids; --loss mse needs float32 targets [N, K]");
      DPT_REQUIRE(info.label_width == static_cast<std::uint64_t>(outputs), ExitCode::kUsage,
                  where + " has " + std::to_string(info.label_width) +
                      " targets per sample but the model's last dense layer has " +
                      std::to_string(outputs) + " outputs");
    }
    ds.max_label = ds.data->validate(loss == LossKind::kXent ? outputs : 0);
  });
  SetShape s{};
  if (mpi.rank() == 0) {
    const SetInfo& i = ds.data->info();
    s = {i.rows,
         i.dim,
         i.label_width,
         i.chunk_rows,
         static_cast<std::int32_t>(i.feature_type),
         static_cast<std::int32_t>(i.label_type),
         ds.max_label};
  }
  DPT_MPI_CHECK(MPI_Bcast(&s, sizeof s, MPI_BYTE, 0, mpi.world()));
  if (mpi.rank() == 0) {
    ds.info = ds.data->info();
  } else {
    ds.info.file = file;
    ds.info.set = set;
    ds.info.rows = s.rows;
    ds.info.dim = s.dim;
    ds.info.label_width = s.label_width;
    ds.info.chunk_rows = s.chunk_rows;
    ds.info.feature_type = static_cast<FeatureType>(s.feature_type);
    ds.info.label_type = static_cast<LabelType>(s.label_type);
    ds.max_label = s.max_label;
  }
  return ds;
}

ShardBuffers::ShardBuffers(Backend& be, int max_rows, std::uint64_t dim,
                           std::uint64_t label_width, LossKind loss, int slot, bool raw_uint8)
    : be_(be), slot_(slot), dim_(dim), label_width_(label_width),
      staged_(be.kind() != DeviceKind::kCpu) {
  const std::size_t rows = static_cast<std::size_t>(std::max(1, max_rows));
  x_ = DeviceBuffer<float>(be, rows * dim);
  if (loss == LossKind::kXent) y_ = DeviceBuffer<std::int32_t>(be, rows);
  else t_ = DeviceBuffer<float>(be, rows * label_width);
  dev_.features = x_.get();
  dev_.labels = y_.get();
  dev_.targets = t_.get();
  if (staged_) {
    hx_ = HostBuffer<float>(be, rows * dim);
    if (loss == LossKind::kXent) hy_ = HostBuffer<std::int32_t>(be, rows);
    else ht_ = HostBuffer<float>(be, rows * label_width);
    host_.features = hx_.get();
    host_.labels = hy_.get();
    host_.targets = ht_.get();
  } else {
    host_ = dev_;  // CPU: MPI writes straight into backend memory
  }
  if (raw_uint8) {
    raw_.resize(rows * dim);
    host_.raw = raw_.data();
  }
}

ShardBuffers::~ShardBuffers() {
  try {
    if (pending_) be_.sync_upload(slot_);
  } catch (...) {  // a failed device: nothing left to protect
  }
}

Shard& ShardBuffers::host() {
  if (pending_) be_.sync_upload(slot_);
  pending_ = false;
  uploaded_ = false;
  return host_;
}

void ShardBuffers::release() {
  if (staged_) be_.release_slot(slot_);
  released_ = true;
}

void ShardBuffers::upload() {
  if (uploaded_) return;
  uploaded_ = true;
  dev_.rows = host_.rows;
  if (host_.raw && host_.rows > 0)
    convert_features(FeatureType::kUint8, host_.raw,
                     static_cast<std::size_t>(host_.rows) * dim_, host_.features);
  if (!staged_ || host_.rows <= 0) return;
  if (!released_) release();
  const std::size_t r = static_cast<std::size_t>(host_.rows);
  be_.upload_async(slot_, dev_.features, host_.features, r * dim_ * sizeof(float));
  if (dev_.labels) be_.upload_async(slot_, dev_.labels, host_.labels, r * sizeof(std::int32_t));
  if (dev_.targets)
    be_.upload_async(slot_, dev_.targets, host_.targets, r * label_width_ * sizeof(float));
  released_ = false;
  pending_ = true;
}

Shard& ShardBuffers::to_device() {
  upload();
  if (pending_) be_.wait_upload(slot_);
  return dev_;
}

Shard& next_shard(InputQueue* queue, Scatter& scatter, std::uint64_t rows, ShardBuffers& shard) {
  std::optional<Batch> batch;
  if (queue) batch = queue->pop();
  scatter.scatter(batch ? &*batch : nullptr, rows, shard.host());
  if (queue && batch) queue->recycle(std::move(*batch));
  return shard.to_device();
}

namespace {
// Duplicates comm into out (so the pipeline's traffic never matches anyone
// else's) and returns it, for use in a member initializer.
MPI_Comm dup_comm(MPI_Comm comm, MPI_Comm& out) {
  DPT_MPI_CHECK(MPI_Comm_dup(comm, &out));
  return out;
}
}  // namespace

InputPipeline::InputPipeline(MPI_Comm comm, Backend& be, InputQueue* queue, int max_rows,
                             std::uint64_t dim, std::uint64_t label_width, LossKind loss,
                             bool raw_uint8)
    : queue_(queue),
      a_(be, max_rows, dim, label_width, loss, 0, raw_uint8),
      b_(be, max_rows, dim, label_width, loss, 1, raw_uint8),
      scatter_(dup_comm(comm, comm_), dim, label_width, loss == LossKind::kXent, raw_uint8) {}

InputPipeline::~InputPipeline() {
  try {
    if (std::uncaught_exceptions() == 0) scatter_.wait();
  } catch (...) {
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void InputPipeline::start(std::uint64_t rows) {
  DPT_REQUIRE(!started_, ExitCode::kOther, "input pipeline: start() twice without finish()");
  if (queue_) batch_ = queue_->pop();
  began_ = std::chrono::steady_clock::now();
  fill_->release();  // the step before last, all queued, was its last reader
  scatter_.start(batch_ ? &*batch_ : nullptr, rows, fill_->host());
  started_ = true;
  seen_done_ = false;
}

void InputPipeline::between_layers() {
  if (started_ && !seen_done_ && scatter_.test()) {
    seen_done_ = true;
    ended_ = std::chrono::steady_clock::now();
    fill_->upload();  // the copy runs on the copy stream, under this step
  }
}

Shard& InputPipeline::finish() {
  DPT_REQUIRE(started_, ExitCode::kOther, "input pipeline: finish() without start()");
  scatter_.wait();
  if (!seen_done_) ended_ = std::chrono::steady_clock::now();
  started_ = false;
  if (queue_ && batch_) {
    queue_->recycle(std::move(*batch_));
    batch_.reset();
  }
  ShardBuffers* done = fill_;
  fill_ = fill_ == &a_ ? &b_ : &a_;
  return done->to_device();
}

void apply_loss(Backend& be, LossKind loss, const float* out, const Shard& shard, int width,
                float grad_scale, float* dout, float* stats) {
  if (shard.rows == 0) return;
  if (loss == LossKind::kXent)
    be.softmax_xent(out, shard.labels, shard.rows, width, grad_scale, dout, stats);
  else
    be.mse(out, shard.targets, shard.rows, width, grad_scale, dout, stats);
}

bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets) {
  auto lap = [timer](Phase p) {
    if (timer) timer->lap(p);
  };
  // Each rank scales by the GLOBAL batch size and the all-reduce sums, so the
  // result is the exact global mean whatever the shard sizes (even empty).
  const float scale = 1.0f / static_cast<float>(global_rows);
  const float* out = model.forward(shard.features, shard.rows, buckets);
  apply_loss(be, loss, out, shard, model.output_dim(), scale, model.output_grad(), stats);
  lap(Phase::kForward);
  if (buckets) {
    buckets->begin_step();
    model.backward(shard.features, model.output_grad(), shard.rows, buckets);
    lap(Phase::kBackward);
    buckets->finish();  // only the part the overlap did not hide
  } else {
    model.backward(shard.features, model.output_grad(), shard.rows);
    lap(Phase::kBackward);
    comm.allreduce_sum(model.grads(), model.num_params());
  }
  lap(Phase::kComm);
  const bool finite = be.count_nonfinite(model.grads(), model.num_params()) == 0;
  if (finite) opt.step(model.params(), model.grads(), lr);
  lap(Phase::kOptimizer);
  return finite;
}

EvalResult evaluate(Runtime& rt, const MpiSession& mpi, DataSet& set, Model& model, LossKind loss,
                    std::uint64_t batch_size, std::size_t cache_bytes) {
  Backend& be = *rt.backend;
  const BatchPlan plan(set.info.rows, batch_size);
  std::unique_ptr<InputQueue> queue;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    InputQueueConfig qc;
    qc.batch_size = batch_size;
    qc.shuffle.mode = ShuffleMode::kNone;
    qc.first_step = 0;
    qc.end_step = plan.steps_per_epoch();
    qc.cache_bytes = cache_bytes;
    qc.raw_uint8 = raw_uint8_wire(set.info);
    queue = std::make_unique<InputQueue>(*set.data, qc);
  });
  const bool raw = raw_uint8_wire(set.info);
  ShardBuffers shard(be, max_shard_rows(batch_size, mpi.size()), set.info.dim,
                     set.info.label_width, loss, 0, raw);
  Scatter scatter(mpi.world(), set.info.dim, set.info.label_width, loss == LossKind::kXent, raw);
  DeviceBuffer<float> stats(be, 2);
  for (std::uint64_t s = 0; s < plan.steps_per_epoch(); ++s) {
    const BatchSlot slot = plan.slot(s);
    Shard& dev = next_shard(queue.get(), scatter, slot.rows, shard);
    if (dev.rows == 0) continue;
    const float* out = model.forward(dev.features, dev.rows);
    apply_loss(be, loss, out, dev, model.output_dim(), 0.0f, model.output_grad(), stats.get());
  }
  rt.comm->allreduce_sum(stats.get(), 2);
  float host[2] = {0, 0};
  be.copy_to_host(host, stats.get(), sizeof host);
  EvalResult r;
  r.samples = set.info.rows;
  r.loss = static_cast<double>(host[0]) / static_cast<double>(set.info.rows);
  r.accuracy = static_cast<double>(host[1]) / static_cast<double>(set.info.rows);
  return r;
}

}  // namespace dptrain
