// Implements: the set-up shared by train, eval and predict (internal): device
// and thread choice, backend and communicator, data sets opened on rank 0
// with their shape broadcast, shard buffers, the loss call and evaluation.
#pragma once

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

// Shard buffers in backend memory (host-staged for device backends).
class ShardBuffers {
 public:
  ShardBuffers(Backend& be, int max_rows, std::uint64_t dim, std::uint64_t label_width,
               LossKind loss);
  // Where Scatter writes (host memory).
  Shard& host() { return host_; }
  // Makes the received shard visible to the backend; returns it.
  Shard& to_device();

 private:
  Backend& be_;
  std::uint64_t dim_, label_width_;
  bool staged_;
  DeviceBuffer<float> x_, t_;
  DeviceBuffer<std::int32_t> y_;
  std::vector<float> hx_, ht_;
  std::vector<std::int32_t> hy_;
  Shard host_, dev_;
};

// Double-buffered input for the step loop: the scatter of batch t+1
// (MPI_Iscatterv on its own communicator, moved along between layers) runs
// while batch t computes. Every rank calls start() and finish() in the same
// order; between them the shard buffers being filled are not touched.
class InputPipeline final : public LayerHooks {
 public:
  InputPipeline(MPI_Comm comm, Backend& be, InputQueue* queue, int max_rows, std::uint64_t dim,
                std::uint64_t label_width, LossKind loss);
  // Completes a scatter still in flight (peers are in it too), unless an
  // error is unwinding the stack (the job is being aborted then).
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // Begins moving the next global batch of `rows` (from the BatchPlan) into
  // the free buffer. Rank 0 first pops it from its queue, which blocks while
  // the reader is behind; returns the ms it waited for that.
  double start(std::uint64_t rows);
  bool started() const { return started_; }
  void between_layers() override { scatter_.test(); }
  // Waits for the started batch and returns this rank's shard in backend
  // memory; valid until the finish() after next.
  Shard& finish();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  InputQueue* queue_;
  ShardBuffers a_, b_;
  ShardBuffers* fill_ = &a_;  // the buffer start() writes into
  Scatter scatter_;
  std::optional<Batch> batch_;  // rank 0: the batch in flight
  bool started_ = false;
};

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
