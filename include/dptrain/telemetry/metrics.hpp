// Implements: the JSON Lines metrics file of docs/design.md section 5 (rank 0),
// and the per-phase step timer behind its "ms" object.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/backends/backend.hpp"
#include "dptrain/telemetry/timeline.hpp"

namespace dptrain {

class MetricsWriter {
 public:
  MetricsWriter() = default;  // disabled until open(): write() does nothing
  ~MetricsWriter();
  // Creates (truncates, or appends to) path; Error(kUsage) naming it on failure.
  void open(const std::string& path, bool append = false);
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  // One line, flushed, so a killed job keeps every event written so far.
  void write(const nlohmann::json& event);

 private:
  std::FILE* f_ = nullptr;
};

enum class Phase { kData, kForward, kBackward, kComm, kOptimizer, kCount };

// Timeline name of a phase: "wait for data", "forward", "backward",
// "all-reduce wait" (the part of the gradient exchange backward did not
// hide), "optimizer".
const char* phase_event_name(Phase p);

// Accumulates wall time per phase between reports; with a timeline attached
// every lap is also an event on the main thread. With a device backend
// attached, every lap also records a device marker, and end_step() replaces
// the host time of the compute phases (forward, backward, all-reduce wait,
// optimizer) by the device time between markers: on a GPU the host only
// queues work, so its clock says nothing about them. "data" stays host time
// (the wait for the shard).
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void attach(Timeline* timeline) { timeline_ = timeline; }
  void attach_device(Backend* backend) { device_ = backend; }
  // step: the step the following laps belong to (timeline only).
  void start(std::int64_t step = -1) {
    t_ = Clock::now();
    step_ = step;
    marks_ = 0;
    overflow_ = false;
    for (double& v : host_lap_) v = 0;
    mark(Phase::kCount);
  }
  // Adds the time since start() (or the previous lap) to phase p.
  void lap(Phase p) {
    auto now = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - t_).count();
    host_lap_[static_cast<int>(p)] += ms;
    ms_[static_cast<int>(p)] += ms;
    if (timeline_ && timeline_->enabled())
      timeline_->add(phase_event_name(p), timeline_category_of(phase_event_name(p)),
                     kTimelineMainThread, t_, now, step_);
    mark(p);
    t_ = now;
  }
  // After the step's work completed (the step read a value back): device
  // times of its phases, where the backend has a device clock.
  // A phase may have several laps in a step (forward, the bn collective,
  // forward again): device and host times are summed per phase first.
  void end_step() {
    if (overflow_) return;
    double device_ms[static_cast<int>(Phase::kCount)] = {};
    for (int k = 1; k < marks_; ++k) {
      const double ms = device_->marker_ms(k - 1, k);
      if (ms < 0) return;  // no device clock: host times stand
      device_ms[mark_phase_[k]] += ms;
    }
    for (int k = 1; k < marks_; ++k) {
      const int p = mark_phase_[k];
      if (p == static_cast<int>(Phase::kData) || host_lap_[p] < 0) continue;
      ms_[p] += device_ms[p] - host_lap_[p];
      host_lap_[p] = -1;  // corrected once
    }
  }
  double ms(Phase p) const { return ms_[static_cast<int>(p)]; }
  void reset() {
    for (double& v : ms_) v = 0;
  }
  // {"data":..,"forward":..,...} averaged over `steps`.
  nlohmann::json per_step_json(double steps) const;

 private:
  void mark(Phase p) {
    if (!device_) return;
    if (marks_ >= Backend::kMarkers) {
      overflow_ = true;  // more laps than markers: end_step keeps host times
      return;
    }
    device_->mark(marks_);
    mark_phase_[marks_++] = static_cast<int>(p);
  }

  Clock::time_point t_ = Clock::now();
  std::int64_t step_ = -1;
  Timeline* timeline_ = nullptr;
  Backend* device_ = nullptr;
  int marks_ = 0;                          // device markers recorded this step
  int mark_phase_[Backend::kMarkers] = {};
  bool overflow_ = false;  // the phase that ends at each marker
  double host_lap_[static_cast<int>(Phase::kCount)] = {};  // this step's host ms per phase
  double ms_[static_cast<int>(Phase::kCount)] = {};
};

}  // namespace dptrain
