// Implements: passes over a whole set without training : one
// forward pass in file order, sharded like training, that evaluation and
// prediction both use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/shared_set.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace dptrain {

// Called on every rank for every global batch of the pass: the batch's slot
// (position and rows in the set), this rank's shard of it and the model's
// outputs for the shard (device memory, [shard.rows, output width]).
using BatchOutputs = std::function<void(const BatchSlot& slot, const Shard& shard, const float* out)>;

// Collective: the model's forward pass (eval mode) over every sample of the
// set, in file order, in global batches of batch_size split across the ranks
// as in training; with max_batches > 0, over the first max_batches batches
// only. Returns the samples covered. Rank 0 reads; the set must be open
// (open_set). events: the model's listener (--shard-params gathers each
// layer's parameters through it); with one, every rank runs forward on
// every batch, also on a shard of no rows.
std::uint64_t forward_pass(const MpiSession& mpi, Backend& be, SharedSet& set, Model& model,
                           LossKind loss, std::uint64_t batch_size, std::size_t cache_bytes,
                           const BatchOutputs& on_batch, LayerListener* events = nullptr,
                           std::uint64_t max_batches = 0);

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // xent only
  std::uint64_t samples = 0;  // covered
  bool whole_set = true;      // samples are all of the set
};

// Collective: the mean loss (and accuracy) of the model over the set (with
// max_batches > 0, over its first max_batches global batches: --eval-batches);
// sums are all-reduced, so every rank returns the same.
EvalResult evaluate(const MpiSession& mpi, Backend& be, Communicator& comm, SharedSet& set,
                    Model& model, LossKind loss, std::uint64_t batch_size, std::size_t cache_bytes,
                    LayerListener* events = nullptr, std::uint64_t max_batches = 0);

}  // namespace dptrain
