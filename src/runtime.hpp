// Implements: the set-up shared by train, eval and predict (internal): device
// and thread choice, backend and communicator, data sets opened on rank 0
// with their shape broadcast, shard buffers, the loss call and evaluation.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dptrain/backend.hpp"
#include "dptrain/comm.hpp"
#include "dptrain/config.hpp"
#include "dptrain/dataset.hpp"
#include "dptrain/input_queue.hpp"
#include "dptrain/launch.hpp"
#include "dptrain/model.hpp"
#include "dptrain/scatter.hpp"

namespace dptrain {

enum class LossKind { kXent, kMse };

struct Runtime {
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;
  int threads = 1;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
};

// Picks the device (--device auto: cuda only when every rank sees a GPU),
// threads and builds backend and communicator. Agreed across ranks.
Runtime make_runtime(const Options& opts, const MpiSession& mpi);

// One set of the data file: the Dataset lives on rank 0 only; info and the
// largest class id are known on every rank.
struct DataSet {
  std::unique_ptr<Dataset> data;  // rank 0 only
  SetInfo info;
  std::int64_t max_label = -1;
};

// Opens and validates file:/set on rank 0 and broadcasts its shape. Agreed:
// a bad file makes every rank throw AgreedFailure(kData).
DataSet open_set(const MpiSession& mpi, const std::string& file, const std::string& set,
                 LossKind loss, int outputs);

LossKind parse_loss(const std::string& name);
const char* loss_name(LossKind loss);

// Shard buffers in backend memory. Device backends stage the shard in
// pinned host memory and upload it on the backend's copy stream through
// upload slot `slot` (one per buffer that may be in flight at once); the CPU
// backend scatters straight into backend memory (zero-copy). A batch's cycle:
// release() once the steps queued so far are done with the shard, host()
// for the scatter, upload() as soon as the scatter completed, to_device()
// before the step that uses it.
class ShardBuffers {
 public:
  // raw_uint8: Scatter writes uint8 features into host().raw and upload()
  // converts them (x / 255) into the float features.
  ShardBuffers(Backend& be, int max_rows, std::uint64_t dim, std::uint64_t label_width,
               LossKind loss, int slot = 0, bool raw_uint8 = false);
  // Waits for this buffer's last upload, which may still be reading the
  // staging memory (an error may unwind the stack mid-step).
  ~ShardBuffers();
  ShardBuffers(const ShardBuffers&) = delete;
  ShardBuffers& operator=(const ShardBuffers&) = delete;

  // Where Scatter writes (host memory); call once per batch, before the
  // scatter. Blocks until the previous upload has read the staging memory
  // (normally long done) and marks the contents as new.
  Shard& host();
  // Work queued on the backend so far no longer reads the device shard, so
  // the next upload may overwrite it. upload() does it itself if not called
  // since the last upload (then ordered after everything queued up to it).
  void release();
  // Converts raw uint8 features and enqueues the copy of the received shard
  // (the scatter must be complete) without blocking. Once per batch; later
  // calls do nothing.
  void upload();
  // upload() if not yet done; orders later backend work after the copy and
  // returns the shard in backend memory.
  Shard& to_device();

 private:
  Backend& be_;
  int slot_;
  std::uint64_t dim_, label_width_;
  bool staged_;
  bool uploaded_ = false;  // the current contents are enqueued (visible, on the CPU)
  bool released_ = false;  // release() since the last upload
  bool pending_ = false;   // an upload may still read the staging memory
  DeviceBuffer<float> x_, t_;
  DeviceBuffer<std::int32_t> y_;
  HostBuffer<float> hx_, ht_;
  HostBuffer<std::int32_t> hy_;
  std::vector<std::uint8_t> raw_;  // raw_uint8: the received features
  Shard host_, dev_;
};

// Double-buffered input for the step loop: the scatter of batch t+1
// (MPI_Iscatterv on its own communicator, moved along between layers) runs
// while batch t computes. Every rank calls start() and finish() in the same
// order; between them the shard buffers being filled are not touched.
class InputPipeline final : public LayerHooks {
 public:
  InputPipeline(MPI_Comm comm, Backend& be, InputQueue* queue, int max_rows, std::uint64_t dim,
                std::uint64_t label_width, LossKind loss, bool raw_uint8 = false);
  // Completes a scatter still in flight (peers are in it too), unless an
  // error is unwinding the stack (the job is being aborted then).
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // Begins moving the next global batch of `rows` (from the BatchPlan) into
  // the free buffer. Rank 0 first pops it from its queue, which blocks while
  // the reader is behind.
  void start(std::uint64_t rows);
  bool started() const { return started_; }
  void between_layers() override;
  // Waits for the started batch and returns this rank's shard in backend
  // memory; valid until the finish() after next.
  Shard& finish();
  // When the last finished batch's scatter started and was first seen
  // complete (for the timeline).
  std::chrono::steady_clock::time_point scatter_began() const { return began_; }
  std::chrono::steady_clock::time_point scatter_ended() const { return ended_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  InputQueue* queue_;
  ShardBuffers a_, b_;
  ShardBuffers* fill_ = &a_;  // the buffer start() writes into
  Scatter scatter_;
  std::optional<Batch> batch_;  // rank 0: the batch in flight
  bool started_ = false, seen_done_ = false;
  std::chrono::steady_clock::time_point began_, ended_;
};

// Whether a set's features travel as uint8 (InputQueueConfig::raw_uint8,
// Scatter and ShardBuffers must agree): every uint8 set.
inline bool raw_uint8_wire(const SetInfo& info) { return info.feature_type == FeatureType::kUint8; }

// Collective: rank 0 pops the next global batch from its queue (queue is
// null on the other ranks) and scatters it; every rank gets its shard back in
// backend memory. rows comes from the BatchPlan, the same on every rank.
Shard& next_shard(InputQueue* queue, Scatter& scatter, std::uint64_t rows, ShardBuffers& shard);

// Adds the shard's loss to stats[0] (and correct count to stats[1]) and writes
// grad_scale * dLoss/dout into dout.
void apply_loss(Backend& be, LossKind loss, const float* out, const Shard& shard, int width,
                float grad_scale, float* dout, float* stats);

class Optimizer;
class PhaseTimer;
class GradientBuckets;

// One synchronized step on this rank's shard: forward, loss scaled by
// 1/global_rows, backward, all-reduce SUM of the gradient arena, then the
// optimizer step at lr unless the reduced gradients hold NaN/Inf. Returns
// false (and skips the update) in that case; every rank sees the same
// reduced gradients, so every rank returns the same. timer may be null.
// With buckets, their all-reduces overlap backward (and buckets' hooks run
// between layers of forward too); without, one all-reduce follows backward.
bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets = nullptr);

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // xent only
  std::uint64_t samples = 0;
};

// Collective: every rank evaluates its shards of the whole set (file order),
// sums are all-reduced.
EvalResult evaluate(Runtime& rt, const MpiSession& mpi, DataSet& set, Model& model, LossKind loss,
                    std::uint64_t batch_size, std::size_t cache_bytes);

}  // namespace dptrain
