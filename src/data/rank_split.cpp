// Implements: the shard counts and offsets of rank_split.hpp.
#include "dptrain/data/rank_split.hpp"

namespace dptrain {

std::vector<int> shard_counts(std::uint64_t rows, int ranks) {
  std::vector<int> c(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    c[static_cast<std::size_t>(r)] = static_cast<int>(rank_rows(rows, ranks, r).count);
  return c;
}

std::vector<int> shard_offsets(const std::vector<int>& counts) {
  std::vector<int> o(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) o[i] = o[i - 1] + counts[i - 1];
  return o;
}

int max_shard_rows(std::uint64_t rows, int ranks) {
  return static_cast<int>(rank_rows(rows, ranks, 0).count);
}

}  // namespace dptrain
