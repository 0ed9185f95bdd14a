// Implements: an input reader's queue (rank 0's by default): a background
// thread that reads ahead, in the order of the sample order and the batch
// plan, into a bounded queue of global batches, or of the reader's ranks'
// shards of them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/rank_split.hpp"
#include "dptrain/data/sample_order.hpp"

namespace dptrain {

class Timeline;

struct Batch {
  BatchSlot slot;
  std::uint64_t rows = 0;        // rows held: slot.rows, or the reader group's rows
  std::vector<float> features;   // rows * dim, converted to float (empty when raw is used)
  std::vector<std::uint8_t> raw; // rows * feature_bytes_per_row, as stored (raw_features)
  std::vector<std::int32_t> labels;  // rows (class labels)
  std::vector<float> targets;    // rows * K (regression targets)
};

struct InputQueueConfig {
  std::uint64_t batch_size = 128;
  ShuffleConfig shuffle;
  std::uint64_t first_step = 0;  // produce steps [first_step, end_step)
  std::uint64_t end_step = 0;
  std::size_t capacity = 4;      // batches held ahead
  // Hold the whole set in memory (raw dtype) when it fits this; otherwise
  // stream from the file (block/none read contiguous runs).
  std::size_t cache_bytes = std::size_t(1) << 30;
  // Features other than float32 stay in their stored type in Batch::raw
  // (uint8 a quarter, float16 and int16 half the bytes to scatter; each rank
  // converts its own shard). No effect on float32 sets.
  bool raw_features = false;
  // Records a "read" event (tid 1) per batch produced; must outlive the queue.
  Timeline* timeline = nullptr;
  // Read only the rows of these ranks' shards (group_rows order); empty:
  // every row of each global batch.
  ShardGroup group;
};

class InputQueue {
 public:
  // Starts the reader thread. The Dataset must outlive the queue, and no
  // other thread may use it while the queue runs.
  InputQueue(Dataset& data, const InputQueueConfig& cfg);
  ~InputQueue();  // stops and joins the thread; never throws
  InputQueue(const InputQueue&) = delete;
  InputQueue& operator=(const InputQueue&) = delete;

  // Next batch in step order; nullopt after end_step. Rethrows an error of
  // the reader thread (Error with kData for bad data).
  std::optional<Batch> pop();
  // Return a consumed batch so its buffers are reused.
  void recycle(Batch&& b);
  // Whether the set is held in memory.
  bool cached() const { return cached_; }

 private:
  void run();
  void produce(std::uint64_t step, Batch& b);
  // produce's parts: the rows this reader holds, then one reader per
  // shuffle mode for a streamed set.
  std::uint64_t plan_rows(const BatchSlot& slot, Batch& b);
  void read_in_file_order(const BatchSlot& slot, Batch& b);
  void read_sorted_runs(std::uint64_t rows, Batch& b);
  void read_block_windows(const BatchSlot& slot, std::uint64_t rows, Batch& b);
  void load_window(std::uint64_t epoch, std::uint64_t w);  // of block windows

  Dataset& data_;
  InputQueueConfig cfg_;
  BatchPlan plan_;
  SampleOrder order_;
  bool cached_ = false;
  std::vector<unsigned char> cache_features_, cache_labels_;
  std::vector<unsigned char> window_features_, window_labels_;
  std::int64_t window_loaded_epoch_ = -1, window_loaded_ = -1;
  std::vector<std::uint64_t> idx_, segment_idx_;
  std::vector<RowRange> segments_;         // batch rows this reader holds
  std::vector<std::uint64_t> positions_;   // epoch position of each held row
  // Streaming scratch: block ids held in window_features_ (ascending), and
  // (index, batch row) pairs sorted by index for full-shuffle run reads.
  std::vector<std::uint64_t> window_blocks_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::vector<Batch> free_;
  std::uint64_t next_pop_step_;
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dptrain
