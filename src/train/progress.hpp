// Implements: what the step loop tells the user (internal): the progress line
// and `train` event every --log-every steps, `eval` events, and the closing
// summary (docs/design.md section 5). Rank 0 prints and writes; the loss sums are
// all-reduced so they cover every rank's shard.
#pragma once

#include <cstdint>
#include <string>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "dptrain/train/evaluate.hpp"

namespace dptrain {

class Progress {
 public:
  Progress(const MpiSession& mpi, Backend& be, Communicator& comm, MetricsWriter& metrics,
           PhaseTimer& timer, std::uint64_t total_steps, int terms_per_sample = 1);

  // Train events and progress lines carry `mfu` from now on: the model
  // FLOPs of a sample's training step (ModelFlops::per_token() times the
  // tokens of a sample) over the dense peak of all ranks together, in
  // FLOP/s. Collective is not needed: every rank passes the same values.
  void count_flops(double flops_per_sample, double peak_flops_all_ranks) {
    flops_per_sample_ = flops_per_sample;
    peak_flops_ = peak_flops_all_ranks;
  }
  // Device sums the steps add to: [0] loss, [1] correct predictions.
  float* stats() { return stats_.get(); }
  // After every step: its rows and wall time.
  void add_step(std::uint64_t rows, double ms);
  // Collective: the progress line and train event for the steps since the
  // last report, which end with `step` (0-based) at learning rate lr.
  // grad_norm >= 0: that step's gradient norm before clipping, reported too.
  void report(std::uint64_t step, std::uint64_t epoch, float lr, float grad_norm = -1.0f);
  // Rank 0: an evaluation's line and eval event, after `steps` steps.
  void eval(std::uint64_t steps, std::uint64_t epoch, const std::string& set, LossKind loss,
            const EvalResult& r);
  // The summary event's memory_mib (docs/design.md section 5), each the
  // largest over the ranks: planned parameters and optimizer state per rank,
  // the measured high-water marks of device buffers (0 where the device is
  // the host) and of host memory (ru_maxrss).
  struct MemoryMib {
    double params = 0, optimizer = 0, peak_device = 0, peak_host = 0;
    // The planned activations, and the measured high-water mark of the
    // backend's buffers on any device (on the cpu, host memory).
    double activations = 0, peak_buffers = 0;
  };
  // Rank 0: the summary of the training steps of this run.
  void summary(std::uint64_t steps, const std::string& device, const MemoryMib& memory);

 private:
  const MpiSession& mpi_;
  Backend& be_;
  Communicator& comm_;
  MetricsWriter& metrics_;
  PhaseTimer& timer_;
  std::uint64_t total_steps_;
  // Loss terms per sample (loss_terms_per_sample): the loss is reported per
  // term (per token of a language model), with tokens/s beside samples/s.
  int terms_;
  DeviceBuffer<float> stats_;
  double flops_per_sample_ = 0.0, peak_flops_ = 0.0;  // count_flops; 0: no mfu
  double train_ms_ = 0.0, interval_ms_ = 0.0;
  std::uint64_t samples_ = 0, interval_samples_ = 0, interval_steps_ = 0;
};

}  // namespace dptrain
