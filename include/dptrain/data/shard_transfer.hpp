// Implements: moving a shard from the scatter into backend memory:
// shard buffers (staged and uploaded on backends that need it),
// the double-buffered input pipeline of the step loop, and next_shard for
// evaluation passes. Sits beside Scatter, which fills the host side.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <mpi.h>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/scatter.hpp"
#include "dptrain/data/shared_set.hpp"
#include "dptrain/model/layer_events.hpp"
#include "dptrain/model/shard.hpp"

namespace dptrain {

// Shard buffers in backend memory. Device backends stage the shard in
// pinned host memory and upload it on the backend's copy stream through
// upload slot `slot` (one per buffer that may be in flight at once); the CPU
// backend scatters straight into backend memory (zero-copy). A batch's cycle:
// release() once the steps queued so far are done with the shard, host()
// for the scatter, upload() as soon as the scatter completed, to_device()
// before the step that uses it.
class ShardBuffers {
 public:
  // wire other than float32: Scatter writes the features in that stored
  // type into host().raw and upload() converts them into the float features.
  ShardBuffers(Backend& be, int max_rows, std::uint64_t dim, std::uint64_t label_width,
               LabelType labels, int slot = 0, FeatureType wire = FeatureType::kFloat32);
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
  // Converts features that arrived as stored and enqueues the copy of the received shard
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
  FeatureType wire_;
  bool staged_;
  bool uploaded_ = false;  // the current contents are enqueued (visible, on the CPU)
  bool released_ = false;  // release() since the last upload
  bool pending_ = false;   // an upload may still read the staging memory
  DeviceBuffer<float> x_, t_;
  DeviceBuffer<std::int32_t> y_;
  HostBuffer<float> hx_, ht_;
  HostBuffer<std::int32_t> hy_;
  std::vector<std::uint8_t> raw_;  // wire other than float32: the received features
  Shard host_, dev_;
};

// Double-buffered input for the step loop: the scatter of batch t+1
// (MPI_Iscatterv on its own communicator, moved along between layers) runs
// while batch t computes. Every rank calls start() and finish() in the same
// order; between them the shard buffers being filled are not touched.
class InputPipeline final : public LayerListener {
 public:
  // comm: the ranks served by one reader, whose world ranks group names
  // (default: the world, one reader); queue: that reader's, null elsewhere.
  InputPipeline(MPI_Comm comm, Backend& be, InputQueue* queue, int max_rows, std::uint64_t dim,
                std::uint64_t label_width, LabelType labels, FeatureType wire = FeatureType::kFloat32,
                ShardGroup group = {});
  // Completes a scatter still in flight (peers are in it too), unless an
  // error is unwinding the stack (the job is being aborted then).
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // Begins moving the next global batch of `rows` (from the BatchPlan) into
  // the free buffer. The reader first pops its part from its queue, which
  // blocks while the reading thread is behind.
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

// Collective: rank 0 pops the next global batch from its queue (queue is
// null on the other ranks) and scatters it; every rank gets its shard back in
// backend memory. rows comes from the BatchPlan, the same on every rank.
Shard& next_shard(InputQueue* queue, Scatter& scatter, std::uint64_t rows, ShardBuffers& shard);

}  // namespace dptrain
