// Implements: moving the training state between the towers and checkpoint
// files: --resume / --init-from on start, periodic and final
// saves, and the tower consistency checksum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/options.hpp"
#include "dptrain/run/runtime.hpp"

namespace dptrain {

struct StartPoint {
  std::uint64_t step = 0;  // first step to run
  std::string from;        // checkpoint resumed or initialised from ("" if fresh)
  bool resumed = false;    // full training state restored (vs weights only)
};

// Applies --resume (auto | never | FILE) and --init-from on every rank: rank
// 0 reads and validates, the outcome is agreed, then weights, optimizer
// state and cursor are broadcast. `plan` checks that the checkpoint's cursor
// is a batch boundary of this run (same --batch-size). state_slices: where
// the optimizer state lives, as the strategy's state_slices() says (empty:
// whole on every rank; else rank r gets its slice of what rank 0 read).
StartPoint restore_state(const Options& opts, const MpiSession& mpi, Runtime& rt, Model& model,
                         Optimizer& opt, LossKind loss, const BatchPlan& plan,
                         const std::vector<std::size_t>& state_slices);

// Rank 0 writes the state after `step` completed steps (atomically) and, for
// periodic checkpoints in a directory, prunes old ones. Agreed: a failed
// write ends the job with exit 4 on every rank. state_slices as for
// restore_state (sliced: rank 0 gathers the state tensor by tensor).
void save_state(const std::string& path, bool in_checkpoint_dir, const Options& opts,
                const MpiSession& mpi, Runtime& rt, Model& model, Optimizer& opt, LossKind loss,
                const BatchPlan& plan, std::uint64_t step,
                const std::vector<std::size_t>& state_slices);

// The state a step loop saves, bound once to what it is made of. Agreed, as
// save_state.
class StateSaver {
 public:
  StateSaver(const Options& opts, const MpiSession& mpi, Runtime& rt, Model& model, Optimizer& opt,
             LossKind loss, const BatchPlan& plan, const std::vector<std::size_t>& state_slices)
      : opts_(opts), mpi_(mpi), rt_(rt), model_(model), opt_(opt), loss_(loss), plan_(plan),
        state_slices_(state_slices) {}
  // After `steps` completed steps: ckpt-<steps>.h5 in --checkpoint-dir, old
  // ones pruned to --keep-checkpoints.
  void to_dir(std::uint64_t steps) const {
    save_state(checkpoint_path(opts_.checkpoint_dir, static_cast<std::int64_t>(steps)), true, opts_,
               mpi_, rt_, model_, opt_, loss_, plan_, steps, state_slices_);
  }
  // After `steps` completed steps: the --save file.
  void to_save_file(std::uint64_t steps) const {
    save_state(opts_.save, false, opts_, mpi_, rt_, model_, opt_, loss_, plan_, steps,
               state_slices_);
  }

 private:
  const Options& opts_;
  const MpiSession& mpi_;
  Runtime& rt_;
  Model& model_;
  Optimizer& opt_;
  LossKind loss_;
  const BatchPlan& plan_;
  const std::vector<std::size_t>& state_slices_;
};

// Agreed check that every tower holds the same parameters: a checksum per
// rank, min and max all-reduced. On a mismatch rank 0 names the ranks that
// differ from it and every rank throws AgreedFailure(kNumeric).
void check_towers(const MpiSession& mpi, Backend& be, Model& model, std::uint64_t step);

}  // namespace dptrain
