// Implements: the batch plan every rank computes alike: which epoch and
// which positions of it each step's global batch covers; and the rows of a
// batch that each member of an input reader's group holds (the rank split
// of rank_split.hpp, applied to the world ranks the group stands for).
#pragma once

#include <cstdint>
#include <vector>

#include "dptrain/data/rank_split.hpp"

namespace dptrain {

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

}  // namespace dptrain
