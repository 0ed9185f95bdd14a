// Implements: when the step loop logs, checks the towers, evaluates and
// checkpoints (internal), as pure functions of the step and the options, so
// the rules are unit-tested apart from MPI (tests/unit/test_loop_policy.cpp).
// `step` is 0-based; "after step s" means s + 1 steps are complete.
#pragma once

#include <cstdint>

namespace dptrain {

struct LoopPolicy {
  std::uint64_t total_steps = 0;       // the run ends after this many steps
  std::uint64_t log_every = 100;       // --log-every (>= 1)
  std::uint64_t check_every = 0;       // --check-every (0: never)
  std::uint64_t checkpoint_every = 0;  // --checkpoint-every (0: only at the end)
  std::uint64_t eval_every = 0;        // --eval-every (0: epoch ends and the end only)
  bool has_val_set = false;            // --val-set given
  bool has_checkpoint_dir = false;     // --checkpoint-dir given
  bool has_save_file = false;          // --save given

  bool last(std::uint64_t step) const { return step + 1 == total_steps; }
  // A train event and progress line after every log_every steps and the last.
  bool log_due(std::uint64_t step) const { return (step + 1) % log_every == 0 || last(step); }
  bool check_due(std::uint64_t step) const {
    return check_every > 0 && (step + 1) % check_every == 0;
  }
  // Evaluation at each epoch end, after every eval_every steps (counted
  // from the first step of training, so a resumed run keeps the schedule)
  // and after the last step; once where these coincide.
  bool eval_due(std::uint64_t step, bool epoch_end) const {
    const bool periodic = eval_every > 0 && (step + 1) % eval_every == 0;
    return has_val_set && (epoch_end || periodic || last(step));
  }
  bool periodic_checkpoint_due(std::uint64_t step) const {
    return has_checkpoint_dir && checkpoint_every > 0 && (step + 1) % checkpoint_every == 0;
  }
  // After a stop signal: a checkpoint in the directory, or else the --save
  // file, so that the requeued job resumes from it.
  bool stop_checkpoint_to_dir() const { return has_checkpoint_dir; }
  bool stop_checkpoint_to_file() const { return !has_checkpoint_dir && has_save_file; }
  bool stop_leaves_checkpoint() const { return has_checkpoint_dir || has_save_file; }
  // At the end (after end_step completed steps, the run having started at
  // first_step): the directory always gets the end, unless nothing ran or
  // the periodic save just wrote this very step.
  bool final_dir_checkpoint_due(std::uint64_t end_step, std::uint64_t first_step) const {
    return has_checkpoint_dir && end_step > first_step &&
           (checkpoint_every == 0 || end_step % checkpoint_every != 0);
  }
};

}  // namespace dptrain
