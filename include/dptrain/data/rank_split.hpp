// Implements: the rank split of a global batch, the one rule every part of
// the input path and the trainer follow. Rank r of P takes B/P rows, and the
// first B%P ranks one more, in rank order; with B < P the last ranks get
// empty shards and contribute zero gradients, so the global mean stays exact
// (docs/design.md section 1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dptrain {

struct RowRange {
  std::uint64_t first = 0, count = 0;
};

// The rows of a batch of `rows` that `rank` of `ranks` holds. No allocation.
inline RowRange rank_rows(std::uint64_t rows, int ranks, int rank) {
  const auto p = static_cast<std::uint64_t>(ranks), r = static_cast<std::uint64_t>(rank);
  const std::uint64_t base = rows / p, extra = rows % p;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

// Rows of each rank's shard of a batch of `rows`.
std::vector<int> shard_counts(std::uint64_t rows, int ranks);
// First row of each rank's shard.
std::vector<int> shard_offsets(const std::vector<int>& counts);
// Largest shard any rank gets from a batch of `rows`.
int max_shard_rows(std::uint64_t rows, int ranks);

}  // namespace dptrain
