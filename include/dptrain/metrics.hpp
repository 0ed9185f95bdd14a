// Implements: the JSON Lines metrics file of DESIGN.md section 5 (rank 0),
// and the per-phase step timer behind its "ms" object.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

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

// Accumulates wall time per phase between reports.
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void start() { t_ = Clock::now(); }
  // Adds the time since start() (or the previous lap) to phase p.
  void lap(Phase p) {
    auto now = Clock::now();
    ms_[static_cast<int>(p)] += std::chrono::duration<double, std::milli>(now - t_).count();
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
  double ms_[static_cast<int>(Phase::kCount)] = {};
};

}  // namespace dptrain
