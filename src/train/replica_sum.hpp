// Implements: the ReplicaSum that layers with global-batch statistics (bn)
// call in the middle of a step (layer.hpp), on the job's communicator: a
// blocking all-reduce SUM of a few values, in rank order like the gradient
// sums, so every rank gets the same bits. Its time is cut out of the
// forward or backward phase it interrupts and counted as `comm` (metrics
// and timeline).
#pragma once

#include <cstdint>

#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/telemetry/metrics.hpp"

namespace dptrain {

class CommReplicaSum final : public ReplicaSum {
 public:
  explicit CommReplicaSum(Communicator& comm) : comm_(comm) {}

  // The phase the calls until the next set_phase interrupt, and the timer to
  // split (null: untimed).
  void set_phase(PhaseTimer* timer, Phase phase) {
    timer_ = timer;
    phase_ = phase;
  }

  void sum(float* data, std::size_t n) override {
    if (timer_) timer_->lap(phase_);
    comm_.allreduce_sum(data, n);
    if (timer_) timer_->lap(Phase::kComm);
    ++calls_;
  }

  // Calls so far (tests: one per bn layer per pass).
  std::uint64_t calls() const { return calls_; }

 private:
  Communicator& comm_;
  PhaseTimer* timer_ = nullptr;
  Phase phase_ = Phase::kForward;
  std::uint64_t calls_ = 0;
};

}  // namespace dptrain
