// Implements: unit tests of the step loop's policy (src/train/loop_policy.hpp):
// when it logs, checks, evaluates and checkpoints.
#include <gtest/gtest.h>

#include <vector>

#include "train/loop_policy.hpp"

namespace dptrain {
namespace {

std::vector<std::uint64_t> steps_where(std::uint64_t total, auto&& due) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = 0; s < total; ++s)
    if (due(s)) out.push_back(s + 1);  // as "after N steps"
  return out;
}

TEST(LoopPolicy, LogsEveryNStepsAndTheLast) {
  LoopPolicy p;
  p.total_steps = 23;
  p.log_every = 10;
  EXPECT_EQ(steps_where(23, [&](auto s) { return p.log_due(s); }),
            (std::vector<std::uint64_t>{10, 20, 23}));
  p.log_every = 1;
  EXPECT_EQ(steps_where(23, [&](auto s) { return p.log_due(s); }).size(), 23u);
}

TEST(LoopPolicy, ChecksOnlyWhenAsked) {
  LoopPolicy p;
  p.total_steps = 9;
  EXPECT_TRUE(steps_where(9, [&](auto s) { return p.check_due(s); }).empty());
  p.check_every = 4;
  EXPECT_EQ(steps_where(9, [&](auto s) { return p.check_due(s); }),
            (std::vector<std::uint64_t>{4, 8}));
}

TEST(LoopPolicy, EvaluatesAtEpochEndsAndTheEndWithAValSet) {
  LoopPolicy p;
  p.total_steps = 7;
  EXPECT_FALSE(p.eval_due(6, true));  // no --val-set
  p.has_val_set = true;
  EXPECT_TRUE(p.eval_due(2, true));
  EXPECT_FALSE(p.eval_due(3, false));
  EXPECT_TRUE(p.eval_due(6, false));  // the last step, mid-epoch
}

TEST(LoopPolicy, EvaluatesEveryNStepsToo) {
  LoopPolicy p;
  p.total_steps = 23;
  p.eval_every = 5;
  // Epoch ends after steps 8 and 16 (and the run ends at 23).
  auto due = [&](auto s) { return p.eval_due(s, (s + 1) % 8 == 0); };
  EXPECT_TRUE(steps_where(23, due).empty());  // no --val-set
  p.has_val_set = true;
  EXPECT_EQ(steps_where(23, due), (std::vector<std::uint64_t>{5, 8, 10, 15, 16, 20, 23}));
  p.eval_every = 8;  // coinciding with the epoch ends: once each
  EXPECT_EQ(steps_where(23, due), (std::vector<std::uint64_t>{8, 16, 23}));
}

TEST(LoopPolicy, PeriodicCheckpointsNeedADirectory) {
  LoopPolicy p;
  p.total_steps = 10;
  p.checkpoint_every = 3;
  EXPECT_TRUE(steps_where(10, [&](auto s) { return p.periodic_checkpoint_due(s); }).empty());
  p.has_checkpoint_dir = true;
  EXPECT_EQ(steps_where(10, [&](auto s) { return p.periodic_checkpoint_due(s); }),
            (std::vector<std::uint64_t>{3, 6, 9}));
}

TEST(LoopPolicy, TheEndIsCheckpointedOnceUnlessNothingRan) {
  LoopPolicy p;
  p.has_checkpoint_dir = true;
  p.checkpoint_every = 5;
  EXPECT_TRUE(p.final_dir_checkpoint_due(12, 0));
  EXPECT_FALSE(p.final_dir_checkpoint_due(10, 0));   // the periodic save wrote step 10
  EXPECT_FALSE(p.final_dir_checkpoint_due(10, 10));  // resumed at the end: nothing ran
  p.checkpoint_every = 0;
  EXPECT_TRUE(p.final_dir_checkpoint_due(10, 3));
  p.has_checkpoint_dir = false;
  EXPECT_FALSE(p.final_dir_checkpoint_due(10, 3));
}

TEST(LoopPolicy, AStopCheckpointsToTheDirectoryElseTheSaveFile) {
  LoopPolicy p;
  EXPECT_FALSE(p.stop_leaves_checkpoint());
  p.has_save_file = true;
  EXPECT_TRUE(p.stop_checkpoint_to_file());
  EXPECT_FALSE(p.stop_checkpoint_to_dir());
  p.has_checkpoint_dir = true;
  EXPECT_TRUE(p.stop_checkpoint_to_dir());
  EXPECT_FALSE(p.stop_checkpoint_to_file());
  EXPECT_TRUE(p.stop_leaves_checkpoint());
}

}  // namespace
}  // namespace dptrain
