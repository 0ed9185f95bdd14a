// Implements: `train --plan-only` (docs/design.md section 2): what one rank
// would hold to train this job — parameters, gradients, optimizer state and
// activations, the latter with and without --recompute blocks — and, with
// --fit-gib G, the largest micro-batch per rank whose plan fits G GiB. The
// activations come from the model's own arena layout (Model::
// activation_plan(rows, recompute)), the same code that sizes a run, for a
// model built here to plan only: neither its parameters nor anything of the
// batch's size is allocated, so a model larger than this machine is planned.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>

#include "dptrain/data/rank_split.hpp"
#include "dptrain/train/rank_memory.hpp"
#include "train/training_run.hpp"

namespace dptrain {
namespace {

// The largest rows in [0, limit] for which fixed + activations(rows) <= budget.
template <typename F>
int largest_rows_within(std::uint64_t budget, std::uint64_t fixed, int limit, F activations) {
  if (fixed + activations(1) > budget) return 0;
  int lo = 1, hi = limit;  // activations(lo) fits; find the last that does
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fixed + activations(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

std::string ratio_text(std::uint64_t a, std::uint64_t b) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", b ? double(a) / double(b) : 0.0);
  return text;
}

}  // namespace

void TrainingRun::print_memory_plan() {
  const int ranks = opts_.plan_ranks > 0 ? static_cast<int>(opts_.plan_ranks) : mpi_.size();
  const int micro = static_cast<int>(opts_.accumulate);
  const int shard_rows = max_shard_rows(batch_, ranks);
  const int micro_rows = (shard_rows + micro - 1) / micro;
  const int rows = std::max(micro_rows, max_shard_rows(eval_batch_, ranks));
  check_model_fits(mpi_, layers_, train_.info, class_labels(loss_));
  std::unique_ptr<Model> model;
  agree(mpi_.world(), [&] {
    model = std::make_unique<Model>(*rt_.backend, layers_, sample_shape(train_.info), 1,
                                    model_vocab(train_.info), Recompute::kNone,
                                    opts_.shard_params ? ModelStorage::kPlanOnlyShardedParams
                                                       : ModelStorage::kPlanOnly,
                                    logits_precision(opts_.precision, loss_));
  });
  if (mpi_.rank() != 0) return;
  RankMemory mem = rank_memory(model->num_params(), state_arrays_of(optimizer_config(opts_)),
                               ranks, opts_.shard_optimizer, micro > 1, opts_.shard_params,
                               model->largest_layer_params(), opts_.precision == "bf16");
  mem.params_bf16 = model->params_bf16_bytes();
  const std::uint64_t fixed = mem.total();
  const ActivationPlan plain = model->activation_plan(rows, Recompute::kNone);
  const ActivationPlan recomputed = model->activation_plan(rows, Recompute::kBlocks);
  std::printf("dptrain: memory plan of one rank of %d, batch %llu (shards of up to %d rows, "
              "micro-batches of up to %d), device %s, precision %s\n",
              ranks, static_cast<unsigned long long>(batch_), shard_rows, micro_rows,
              rt_.backend->name().c_str(), opts_.precision.c_str());
  std::printf("dptrain:   %s\n", describe(mem).c_str());
  std::printf("dptrain:   activations for %d rows: kept for backward %s, with --recompute blocks %s "
              "(%s); workspace %s, with --recompute blocks %s\n",
              rows, human_bytes(plain.kept).c_str(), human_bytes(recomputed.kept).c_str(),
              ratio_text(recomputed.kept, plain.kept).c_str(), human_bytes(plain.workspace).c_str(),
              human_bytes(recomputed.workspace).c_str());
  std::printf("dptrain:   total: %s; with --recompute blocks %s (%s)\n",
              human_bytes(fixed + plain.total()).c_str(),
              human_bytes(fixed + recomputed.total()).c_str(),
              ratio_text(fixed + recomputed.total(), fixed + plain.total()).c_str());
  if (opts_.fit_gib > 0) {
    const auto budget = static_cast<std::uint64_t>(opts_.fit_gib * 1073741824.0);
    // Kernels index rows · positions with int.
    const int limit = INT_MAX / std::max(1, model->output_positions()) / 2;
    for (const Recompute how : {Recompute::kNone, Recompute::kBlocks}) {
      const int fit = largest_rows_within(budget, fixed, limit, [&](int r) {
        return std::uint64_t(model->activation_plan(r, how).total());
      });
      std::printf("dptrain:   largest micro-batch per rank in %g GiB%s: %d rows (global batch %lld "
                  "with --accumulate %d)\n",
                  opts_.fit_gib, how == Recompute::kBlocks ? " with --recompute blocks" : "", fit,
                  static_cast<long long>(fit) * ranks * micro, micro);
    }
  }
  std::fflush(stdout);
}

}  // namespace dptrain
