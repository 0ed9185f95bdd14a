// Implements: BatchPlan (batch_plan.hpp), the step -> (epoch, position, rows)
// map of every rank, and group_rows, the shards of an input reader's group.
#include "dptrain/data/batch_plan.hpp"

#include <algorithm>

#include "dptrain/common/error.hpp"

namespace dptrain {

BatchPlan::BatchPlan(std::uint64_t n, std::uint64_t batch_size)
    : n_(n), batch_(batch_size), steps_per_epoch_(batch_size ? (n + batch_size - 1) / batch_size : 0) {
  DPT_REQUIRE(batch_size > 0, ExitCode::kUsage, "batch size must be > 0");
  DPT_REQUIRE(n > 0, ExitCode::kData, "the training set is empty");
}

BatchSlot BatchPlan::slot(std::uint64_t step) const {
  BatchSlot s;
  s.step = step;
  s.epoch = step / steps_per_epoch_;
  s.position = (step % steps_per_epoch_) * batch_;
  s.rows = std::min(batch_, n_ - s.position);
  return s;
}

void group_rows(std::uint64_t rows, const ShardGroup& group, std::vector<RowRange>& out) {
  out.resize(group.members.size());
  for (std::size_t i = 0; i < group.members.size(); ++i)
    out[i] = rank_rows(rows, group.world_size, group.members[i]);
}

}  // namespace dptrain
