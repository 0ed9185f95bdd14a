// Implements: shard buffers and the input pipeline (see shard_transfer.hpp).
#include "dptrain/data/shard_transfer.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

ShardBuffers::ShardBuffers(Backend& be, int max_rows, std::uint64_t dim,
                           std::uint64_t label_width, LabelType labels, int slot, FeatureType wire)
    : be_(be), slot_(slot), dim_(dim), label_width_(label_width), wire_(wire),
      staged_(be.caps().staged_uploads) {
  const std::size_t rows = static_cast<std::size_t>(std::max(1, max_rows));
  x_ = DeviceBuffer<float>(be, rows * dim);
  if (labels == LabelType::kClass) y_ = DeviceBuffer<std::int32_t>(be, rows * label_width);
  else t_ = DeviceBuffer<float>(be, rows * label_width);
  dev_.features = x_.get();
  dev_.labels = y_.get();
  dev_.targets = t_.get();
  if (staged_) {
    hx_ = HostBuffer<float>(be, rows * dim);
    if (labels == LabelType::kClass) hy_ = HostBuffer<std::int32_t>(be, rows * label_width);
    else ht_ = HostBuffer<float>(be, rows * label_width);
    host_.features = hx_.get();
    host_.labels = hy_.get();
    host_.targets = ht_.get();
  } else {
    host_ = dev_;  // CPU: MPI writes straight into backend memory
  }
  if (wire != FeatureType::kFloat32) {
    raw_.resize(rows * dim * feature_item_bytes(wire));
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
    convert_features(wire_, host_.raw,
                     static_cast<std::size_t>(host_.rows) * dim_, host_.features);
  if (!staged_ || host_.rows <= 0) return;
  if (!released_) release();
  const std::size_t r = static_cast<std::size_t>(host_.rows);
  be_.upload_async(slot_, dev_.features, host_.features, r * dim_ * sizeof(float));
  if (dev_.labels)
    be_.upload_async(slot_, dev_.labels, host_.labels, r * label_width_ * sizeof(std::int32_t));
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
                             std::uint64_t dim, std::uint64_t label_width, LabelType labels,
                             FeatureType wire, ShardGroup group)
    : queue_(queue),
      a_(be, max_rows, dim, label_width, labels, 0, wire),
      b_(be, max_rows, dim, label_width, labels, 1, wire),
      scatter_(dup_comm(comm, comm_), dim, label_width, labels == LabelType::kClass, wire,
               std::move(group)) {}

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

}  // namespace dptrain
