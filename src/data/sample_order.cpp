// Implements: SampleOrder (sample_order.hpp): the none / full / block
// shuffles as pure functions of seed and epoch, and the block layout's
// per-epoch draws.
#include "dptrain/data/sample_order.hpp"

#include <numeric>
#include <string>

#include "dptrain/common/error.hpp"
#include "dptrain/common/random.hpp"

namespace dptrain {

ShuffleMode parse_shuffle(const std::string& name, bool fits_cache) {
  if (name == "none") return ShuffleMode::kNone;
  if (name == "full") return ShuffleMode::kFull;
  if (name == "block") return ShuffleMode::kBlock;
  if (name != "auto") throw_bad_choice("shuffle", name, "auto, none, full, block");
  return fits_cache ? ShuffleMode::kFull : ShuffleMode::kBlock;
}

const char* shuffle_name(ShuffleMode mode) {
  return mode == ShuffleMode::kNone ? "none" : mode == ShuffleMode::kFull ? "full" : "block";
}
namespace {

// Purposes mixed into the seed, so the shuffle streams are independent of
// each other and of weight init / dropout ("shuffle", "block", "window").
constexpr std::uint64_t kShuffleTag = 0x73687566666c65ULL;
constexpr std::uint64_t kBlockTag = 0x626c6f636bULL;
constexpr std::uint64_t kWindowTag = 0x77696e646f77ULL;
constexpr std::uint64_t kWindowsPerEpoch = std::uint64_t(1) << 20;  // window seed stride

Rng block_rng(const ShuffleConfig& c, std::uint64_t epoch) {
  return Rng(mix_seed(c.seed, kBlockTag, epoch));
}

}  // namespace

// --- BlockLayout -------------------------------------------------------------

std::uint64_t BlockLayout::short_slot(const ShuffleConfig& c, std::uint64_t epoch) const {
  Rng rng = block_rng(c, epoch);
  return rng.below(blocks);
}

void BlockLayout::order(const ShuffleConfig& c, std::uint64_t epoch,
                        std::vector<std::uint64_t>& out) const {
  Rng rng = block_rng(c, epoch);
  const std::uint64_t slot = rng.below(blocks);
  out.resize(blocks - 1);
  std::iota(out.begin(), out.end(), std::uint64_t(0));
  shuffle(out, rng);
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(slot), blocks - 1);
}

// --- SampleOrder -------------------------------------------------------------

SampleOrder::SampleOrder(std::uint64_t n, ShuffleConfig cfg) : n_(n), cfg_(cfg) {
  DPT_REQUIRE(cfg_.mode != ShuffleMode::kBlock || (cfg_.block_rows > 0 && cfg_.window_blocks > 0),
              ExitCode::kUsage, "block shuffle needs block rows and window blocks > 0");
}

void SampleOrder::indices(std::uint64_t epoch, std::uint64_t pos, std::uint64_t count,
                          std::vector<std::uint64_t>& out) {
  DPT_REQUIRE(pos <= n_ && count <= n_ - pos, ExitCode::kOther,
              "sample positions [" + std::to_string(pos) + ", " + std::to_string(pos + count) +
                  ") are past the epoch (" + std::to_string(n_) + " samples)");
  out.resize(count);
  const auto e = static_cast<std::int64_t>(epoch);
  if (cfg_.mode == ShuffleMode::kNone) {
    std::iota(out.begin(), out.end(), pos);
  } else if (cfg_.mode == ShuffleMode::kFull) {
    if (cached_epoch_ != e) {
      perm_.resize(n_);
      std::iota(perm_.begin(), perm_.end(), std::uint64_t(0));
      Rng rng(mix_seed(cfg_.seed, kShuffleTag, epoch));
      shuffle(perm_, rng);
      cached_epoch_ = e;
    }
    std::copy_n(perm_.begin() + pos, count, out.begin());
  } else {
    const BlockLayout layout(n_, cfg_);
    if (cached_epoch_ != e) {
      layout.order(cfg_, epoch, block_perm_);
      cached_epoch_ = e;
      cached_window_ = -1;
    }
    const std::uint64_t short_slot = layout.short_slot(cfg_, epoch);
    for (std::uint64_t i = 0; i < count;) {
      const std::uint64_t p = pos + i, w = layout.window_of(p, short_slot);
      if (cached_window_ != static_cast<std::int64_t>(w)) {
        window_perm_.clear();
        const std::uint64_t last = std::min(layout.blocks, (w + 1) * layout.per_window);
        for (std::uint64_t s = w * layout.per_window; s < last; ++s) {
          const std::uint64_t first = block_perm_[s] * layout.rows;
          for (std::uint64_t r = first; r < std::min(n_, first + layout.rows); ++r)
            window_perm_.push_back(r);
        }
        Rng rng(mix_seed(cfg_.seed, kWindowTag, epoch * kWindowsPerEpoch + w));
        shuffle(window_perm_, rng);
        cached_window_ = static_cast<std::int64_t>(w);
      }
      const std::uint64_t begin = layout.start(w, short_slot);
      const std::uint64_t take = std::min(count - i, layout.start(w + 1, short_slot) - p);
      std::copy_n(window_perm_.begin() + (p - begin), take, out.begin() + i);
      i += take;
    }
  }
}

}  // namespace dptrain
