// Implements: InputQueue's reader thread (input_queue.hpp), which fills a
// bounded queue from an in-memory copy of the set or by streaming the file
// (file order, sorted runs for a full shuffle, whole windows for a block one).
#include "dptrain/data/input_queue.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dptrain/telemetry/timeline.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kCacheLoadBytes = std::size_t(64) << 20;  // per read; stop checked between

// Copies one stored row (raw features, int32 or float32 labels) into row
// dst: features converted to float, or kept as bytes in b.raw (raw mode).
void put_row(const SetInfo& info, const unsigned char* feat, const unsigned char* label, Batch& b,
             std::uint64_t dst) {
  if (!b.raw.empty())
    std::memcpy(b.raw.data() + dst * info.feature_bytes_per_row(), feat, info.feature_bytes_per_row());
  else
    convert_features(info.feature_type, feat, info.dim, b.features.data() + dst * info.dim);
  if (info.label_type == LabelType::kClass)
    std::memcpy(&b.labels[dst * info.label_width], label, info.label_bytes_per_row());
  else
    std::memcpy(&b.targets[dst * info.label_width], label, info.label_bytes_per_row());
}

}  // namespace

InputQueue::InputQueue(Dataset& data, const InputQueueConfig& cfg)
    : data_(data),
      cfg_(cfg),
      plan_(data.info().rows, cfg.batch_size),
      order_(data.info().rows, cfg.shuffle),
      next_pop_step_(cfg.first_step) {
  cfg_.capacity = std::max<std::size_t>(cfg_.capacity, 1);
  const SetInfo& info = data_.info();
  const std::uint64_t row_bytes = info.feature_bytes_per_row() + info.label_bytes_per_row();
  cached_ = info.rows <= cfg_.cache_bytes / row_bytes;
  free_.reserve(cfg_.capacity + 2);  // recycle() never allocates
  thread_ = std::thread([this] { run(); });
}

InputQueue::~InputQueue() {
  try {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  } catch (...) {
    // A destructor must not throw; join only fails on a broken thread.
  }
}

std::optional<Batch> InputQueue::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty() || done_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  ++next_pop_step_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

void InputQueue::recycle(Batch&& b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.size() < cfg_.capacity + 2) free_.push_back(std::move(b));
}

void InputQueue::run() {
  try {
    if (cached_) {
      const SetInfo& info = data_.info();
      const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
      cache_features_.resize(info.rows * fb);
      cache_labels_.resize(info.rows * lb);
      const std::uint64_t piece = std::max<std::uint64_t>(1, kCacheLoadBytes / (fb + lb));
      for (std::uint64_t begin = 0; begin < info.rows; begin += piece) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) break;
        }
        const std::uint64_t cnt = std::min(piece, info.rows - begin);
        data_.read_rows(begin, cnt, cache_features_.data() + begin * fb,
                        cache_labels_.data() + begin * lb);
      }
    }
    for (std::uint64_t step = cfg_.first_step; step < cfg_.end_step; ++step) {
      Batch b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || ready_.size() < cfg_.capacity; });
        if (stop_) break;
        if (!free_.empty()) {
          b = std::move(free_.back());
          free_.pop_back();
        }
      }
      {
        Timeline::Scope read_event(cfg_.timeline, "read", timeline_category::kInput,
                                   kTimelineInputThread, static_cast<std::int64_t>(step));
        produce(step, b);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) break;
        ready_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

// The batch positions this reader holds, ascending (every one, or the
// shards of the ranks it serves), their stored rows in idx_, and the batch's
// buffers sized for them. Returns the row count.
std::uint64_t InputQueue::plan_rows(const BatchSlot& slot, Batch& b) {
  const SetInfo& info = data_.info();
  if (cfg_.group.members.empty()) {
    segments_.resize(1);
    segments_[0] = {0, slot.rows};
  } else {
    group_rows(slot.rows, cfg_.group, segments_);
  }
  std::uint64_t rows = 0;
  for (const RowRange& seg : segments_) rows += seg.count;
  b.rows = rows;
  const bool raw = cfg_.raw_features && info.feature_type != FeatureType::kFloat32;
  b.features.resize(raw ? 0 : rows * info.dim);
  b.raw.resize(raw ? rows * info.feature_bytes_per_row() : 0);
  const bool classes = info.label_type == LabelType::kClass;
  b.labels.resize(classes ? rows * info.label_width : 0);
  b.targets.resize(classes ? 0 : rows * info.label_width);
  idx_.resize(rows);
  positions_.resize(rows);
  for (std::uint64_t at = 0; const RowRange& seg : segments_) {
    order_.indices(slot.epoch, slot.position + seg.first, seg.count, segment_idx_);
    std::copy(segment_idx_.begin(), segment_idx_.end(), idx_.begin() + static_cast<std::ptrdiff_t>(at));
    std::iota(positions_.begin() + static_cast<std::ptrdiff_t>(at),
              positions_.begin() + static_cast<std::ptrdiff_t>(at + seg.count), slot.position + seg.first);
    at += seg.count;
  }
  return rows;
}

void InputQueue::produce(std::uint64_t step, Batch& b) {
  const SetInfo& info = data_.info();
  const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
  const BatchSlot slot = plan_.slot(step);
  b.slot = slot;
  const std::uint64_t rows = plan_rows(slot, b);
  if (cached_) {
    for (std::uint64_t i = 0; i < rows; ++i)
      put_row(info, &cache_features_[idx_[i] * fb], &cache_labels_[idx_[i] * lb], b, i);
  } else if (cfg_.shuffle.mode == ShuffleMode::kNone) {
    read_in_file_order(slot, b);
  } else if (cfg_.shuffle.mode == ShuffleMode::kFull) {
    read_sorted_runs(rows, b);
  } else {
    read_block_windows(slot, rows, b);
  }
}

// Unshuffled: each segment is one run of stored rows, read straight into
// the batch (converted on the way unless the features travel as stored).
void InputQueue::read_in_file_order(const BatchSlot& slot, Batch& b) {
  const SetInfo& info = data_.info();
  const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
  const bool raw = cfg_.raw_features && info.feature_type != FeatureType::kFloat32;
  auto* label_out = info.label_type == LabelType::kClass
                        ? reinterpret_cast<unsigned char*>(b.labels.data())
                        : reinterpret_cast<unsigned char*>(b.targets.data());
  for (std::uint64_t dst = 0; const RowRange& seg : segments_) {
    const std::uint64_t first = slot.position + seg.first, cnt = seg.count;
    if (cnt == 0) continue;
    if (info.feature_type == FeatureType::kFloat32) {
      data_.read_rows(first, cnt, b.features.data() + dst * info.dim, label_out + dst * lb);
    } else if (raw) {
      data_.read_rows(first, cnt, b.raw.data() + dst * fb, label_out + dst * lb);
    } else {
      window_features_.resize(std::max(window_features_.size(), cnt * fb));
      data_.read_rows(first, cnt, window_features_.data(), label_out + dst * lb);
      convert_features(info.feature_type, window_features_.data(), cnt * info.dim,
                       b.features.data() + dst * info.dim);
    }
    dst += cnt;
  }
}

// Full shuffle, streamed. Bounded memory, not speed: sort the batch's rows,
// read each run of consecutive rows once (the chunk cache absorbs repeats),
// scatter them to their batch places.
void InputQueue::read_sorted_runs(std::uint64_t rows, Batch& b) {
  const SetInfo& info = data_.info();
  const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
  runs_.resize(rows);
  for (std::uint64_t i = 0; i < rows; ++i) runs_[i] = {idx_[i], i};
  std::sort(runs_.begin(), runs_.end());
  for (std::uint64_t i = 0; i < rows;) {
    std::uint64_t j = i + 1;
    while (j < rows && runs_[j].first == runs_[i].first + (j - i)) ++j;
    const std::uint64_t cnt = j - i;
    window_features_.resize(std::max(window_features_.size(), cnt * fb));
    window_labels_.resize(std::max(window_labels_.size(), cnt * lb));
    data_.read_rows(runs_[i].first, cnt, window_features_.data(), window_labels_.data());
    for (std::uint64_t r = 0; r < cnt; ++r)
      put_row(info, &window_features_[r * fb], &window_labels_[r * lb], b, runs_[i + r].second);
    i = j;
  }
}

// Block shuffle: rows come from the window holding their position, loaded
// whole once per (epoch, window).
void InputQueue::read_block_windows(const BatchSlot& slot, std::uint64_t rows, Batch& b) {
  const SetInfo& info = data_.info();
  const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
  const BlockLayout layout(info.rows, cfg_.shuffle);
  const std::uint64_t short_slot = layout.short_slot(cfg_.shuffle, slot.epoch);
  std::uint64_t window_end = 0;
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::uint64_t p = positions_[i];
    if (i == 0 || p >= window_end) {
      const std::uint64_t w = layout.window_of(p, short_slot);
      window_end = layout.start(w + 1, short_slot);
      if (window_loaded_epoch_ != static_cast<std::int64_t>(slot.epoch) ||
          window_loaded_ != static_cast<std::int64_t>(w))
        load_window(slot.epoch, w);
    }
    const std::uint64_t row = idx_[i], block = row / layout.rows;
    const auto it = std::lower_bound(window_blocks_.begin(), window_blocks_.end(), block);
    const std::uint64_t at = (it - window_blocks_.begin()) * layout.rows + row % layout.rows;
    put_row(info, &window_features_[at * fb], &window_labels_[at * lb], b, i);
  }
}

void InputQueue::load_window(std::uint64_t epoch, std::uint64_t w) {
  const SetInfo& info = data_.info();
  const BlockLayout layout(info.rows, cfg_.shuffle);
  const std::size_t fb = info.feature_bytes_per_row(), lb = info.label_bytes_per_row();
  // Keep the window's block ids ascending: a row's place in the buffer is
  // then its block's rank, found by binary search.
  layout.order(cfg_.shuffle, epoch, window_blocks_);
  const std::uint64_t s0 = w * layout.per_window;
  const std::uint64_t s1 = std::min(layout.blocks, s0 + layout.per_window);
  window_blocks_.erase(window_blocks_.begin() + static_cast<std::ptrdiff_t>(s1), window_blocks_.end());
  window_blocks_.erase(window_blocks_.begin(), window_blocks_.begin() + static_cast<std::ptrdiff_t>(s0));
  std::sort(window_blocks_.begin(), window_blocks_.end());
  const std::uint64_t capacity_rows = window_blocks_.size() * layout.rows;
  window_features_.resize(std::max(window_features_.size(), capacity_rows * fb));
  window_labels_.resize(std::max(window_labels_.size(), capacity_rows * lb));
  window_loaded_epoch_ = window_loaded_ = -1;  // half-loaded if a read throws
  for (std::size_t k = 0; k < window_blocks_.size();) {
    std::size_t m = k + 1;  // adjacent block ids: one read
    while (m < window_blocks_.size() && window_blocks_[m] == window_blocks_[k] + (m - k)) ++m;
    const std::uint64_t first = window_blocks_[k] * layout.rows;
    const std::uint64_t cnt = std::min(info.rows, window_blocks_[m - 1] * layout.rows + layout.rows) - first;
    data_.read_rows(first, cnt, &window_features_[k * layout.rows * fb],
                    &window_labels_[k * layout.rows * lb]);
    k = m;
  }
  window_loaded_epoch_ = static_cast<std::int64_t>(epoch);
  window_loaded_ = static_cast<std::int64_t>(w);
}

}  // namespace dptrain
