// Implements: the sample order, which dataset index sits at each position of
// each epoch: a pure function of seed and epoch (--shuffle none, full or
// block), never of the number of ranks or the batch size; and the block
// shuffle's layout, which the input queue's block-window reader shares.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

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

// Block mode: blocks of block_rows consecutive rows (the last one may be
// short), permuted per epoch; window w holds the blocks at permuted slots
// [w*W, (w+1)*W). The short block's slot is drawn first, so where windows
// start is known in O(1) (the queue needs that per batch, SampleOrder too).
struct BlockLayout {
  std::uint64_t n, rows, per_window, blocks, windows, deficit;
  BlockLayout(std::uint64_t n_, const ShuffleConfig& c)
      : n(n_), rows(c.block_rows), per_window(c.window_blocks) {
    blocks = (n + rows - 1) / rows;
    windows = (blocks + per_window - 1) / per_window;
    deficit = blocks * rows - n;
  }
  // The permuted slot of the short block in the epoch.
  std::uint64_t short_slot(const ShuffleConfig& c, std::uint64_t epoch) const;
  // Block ids in slot order for the epoch.
  void order(const ShuffleConfig& c, std::uint64_t epoch, std::vector<std::uint64_t>& out) const;
  // The first epoch position of window w (n past the last window).
  std::uint64_t start(std::uint64_t w, std::uint64_t short_slot) const {
    if (w >= windows) return n;
    return w * per_window * rows - (w > short_slot / per_window ? deficit : 0);
  }
  // The window that holds epoch position pos.
  std::uint64_t window_of(std::uint64_t pos, std::uint64_t short_slot) const {
    std::uint64_t w = std::min(pos / (per_window * rows), windows - 1);
    return (w + 1 < windows && start(w + 1, short_slot) <= pos) ? w + 1 : w;
  }
};

}  // namespace dptrain
