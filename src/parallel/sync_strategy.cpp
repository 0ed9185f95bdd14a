// Implements: make_sync_strategy, the one place that maps options to
// parallel strategies (see dptrain/parallel/sync_strategy.hpp). A new
// strategy is its own files in src/parallel/ and one line here.
#include "dptrain/common/error.hpp"
#include "dptrain/parallel/sync_strategy.hpp"
#include "dptrain/run/options.hpp"
#include "parallel/replicated_sync.hpp"
#include "parallel/sharded_params_sync.hpp"
#include "parallel/sliced_optimizer_sync.hpp"

namespace dptrain {

std::unique_ptr<SyncStrategy> make_sync_strategy(const Options& opts, const SyncSetup& s) {
  if (opts.shard_params)
    return std::make_unique<ShardedParamsSync>(s.backend, s.comm, s.model, s.seed,
                                               s.micro_batches > 1, opts.precision == "bf16");
  if (opts.shard_optimizer)
    return std::make_unique<SlicedOptimizerSync>(s.backend, s.comm, s.model, s.bucket_bytes);
  return std::make_unique<ReplicatedSync>(s.backend, s.comm, s.model, s.bucket_bytes);
}

}  // namespace dptrain
