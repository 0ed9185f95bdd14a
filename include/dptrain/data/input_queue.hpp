// Implements: the sample order (a pure function of seed and epoch), the batch
// plan every rank computes alike, and an input reader's queue (rank 0's by
// default): a background thread that reads ahead into a bounded queue of
// global batches, or of the reader's ranks' shards of them.
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

#include "dptrain/data/dataset.hpp"
#include "dptrain/data/rank_split.hpp"

namespace dptrain {

class Timeline;

enum class ShuffleMode { kNone, kFull, kBlock };
// --shuffle: none, full, block, or auto (full when the set fits the input
// cache, else block). Error(kUsage) for another name.
ShuffleMode parse_shuffle(const std::string& name, bool fits_cache);
const char* shuffle_name(ShuffleMode mode);

struct ShuffleConfig {
  ShuffleMode mode = ShuffleMode::kFull;
  std::uint64_t seed = 0;
  std::uint64_t block_rows = 1024;   // block mode: rows per contiguous block
  std::uint64_t window_blocks = 64;  // block mode: blocks shuffled together
};

// Which dataset index sits at each position of each epoch. Depends on
// (N, config, epoch) only, never on the number of ranks or the batch size.
class SampleOrder {
 public:
  SampleOrder(std::uint64_t n, ShuffleConfig cfg);
  // out[i] = index at position pos + i of `epoch`, for i < count.
  void indices(std::uint64_t epoch, std::uint64_t pos, std::uint64_t count,
               std::vector<std::uint64_t>& out);
  std::uint64_t size() const { return n_; }
  const ShuffleConfig& config() const { return cfg_; }

 private:
  std::uint64_t n_;
  ShuffleConfig cfg_;
  // Cached permutation (full: whole epoch; block: block order of the epoch
  // plus the permutation inside the current window).
  std::int64_t cached_epoch_ = -1;
  std::vector<std::uint64_t> perm_;
  std::vector<std::uint64_t> block_perm_;
  std::int64_t cached_window_ = -1;
  std::vector<std::uint64_t> window_perm_;
};

// Global batch schedule: step s of a run covers positions
// [position, position + rows) of epoch `epoch`. The last batch of an epoch
// is smaller (never dropped or padded).
struct BatchSlot {
  std::uint64_t step = 0, epoch = 0, position = 0, rows = 0;
};
class BatchPlan {
 public:
  BatchPlan(std::uint64_t n, std::uint64_t batch_size);
  std::uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  BatchSlot slot(std::uint64_t step) const;
  std::uint64_t n() const { return n_; }
  std::uint64_t batch_size() const { return batch_; }

 private:
  std::uint64_t n_, batch_, steps_per_epoch_;
};

// The ranks one input reader serves (docs/design.md --input-readers): their world
// ranks in the order of the scatter communicator's ranks, out of world_size.
// Empty: the communicator is the whole world and its rank r is world rank r.
struct ShardGroup {
  int world_size = 0;
  std::vector<int> members;
};

// Batch rows [first, first + count) of the shard of one member.
// The members' shards of a batch of `rows`, in member order (each member's
// shard is what it would get from one reader for everyone).
void group_rows(std::uint64_t rows, const ShardGroup& group, std::vector<RowRange>& out);

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
