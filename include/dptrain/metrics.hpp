// Implements: the JSON Lines metrics file of DESIGN.md section 5 (rank 0),
// and the per-phase step timer behind its "ms" object.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/timeline.hpp"

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
// every lap is also an event on the main thread.
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void attach(Timeline* timeline) { timeline_ = timeline; }
  // step: the step the following laps belong to (timeline only).
  void start(std::int64_t step = -1) {
    t_ = Clock::now();
    step_ = step;
  }
  // Adds the time since start() (or the previous lap) to phase p.
  void lap(Phase p) {
    auto now = Clock::now();
    ms_[static_cast<int>(p)] += std::chrono::duration<double, std::milli>(now - t_).count();
    if (timeline_ && timeline_->enabled())
      timeline_->add(phase_event_name(p), timeline_category_of(phase_event_name(p)),
                     kTimelineMainThread, t_, now, step_);
    t_ = now;
  }
  double ms(Phase p) const { return ms_[static_cast<int>(p)]; }
  double total_ms() const {
    double s = 0;
    for (double v : ms_) s += v;
    return s;
  }
  void reset() {
    for (double& v : ms_) v = 0;
  }
  // {"data":..,"forward":..,...} averaged over `steps`.
  nlohmann::json per_step_json(double steps) const;

 private:
  Clock::time_point t_ = Clock::now();
  std::int64_t step_ = -1;
  Timeline* timeline_ = nullptr;
  double ms_[static_cast<int>(Phase::kCount)] = {};
};

}  // namespace dptrain
