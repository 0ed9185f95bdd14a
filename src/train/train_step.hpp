// Implements: one synchronized training step (internal): forward, loss
// scaled by 1/B_global, backward with bucketed gradient all-reduces, then the
// optimizer step that every rank applies alike (docs/design.md section 1).
#pragma once

#include <cstdint>

#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/shard.hpp"

namespace dptrain {

class Optimizer;
class PhaseTimer;
class GradientBuckets;
class CommReplicaSum;

// One synchronized step on this rank's shard: forward, loss scaled by
// 1/global_rows, backward, all-reduce SUM of the gradient arena, then the
// optimizer step at lr unless the reduced gradients hold NaN/Inf. Returns
// false (and skips the update) in that case; every rank sees the same
// reduced gradients, so every rank returns the same. timer may be null.
// With buckets, their all-reduces overlap backward (and buckets' hooks run
// between layers of forward too); without, one all-reduce follows backward.
// replicas: the model's StepInfo::replicas, when it has one, so that its
// collectives are timed in the phase they interrupt.
bool train_step(Backend& be, Communicator& comm, Model& model, Optimizer& opt, LossKind loss,
                const Shard& shard, std::uint64_t global_rows, float lr, float* stats,
                PhaseTimer* timer, GradientBuckets* buckets = nullptr,
                CommReplicaSum* replicas = nullptr);

}  // namespace dptrain
