// Implements: MetricsWriter and PhaseTimer::per_step_json.
#include "dptrain/telemetry/metrics.hpp"

#include <cmath>

#include "dptrain/common/error.hpp"

namespace dptrain {

void MetricsWriter::open(const std::string& path, bool append) {
  if (f_) std::fclose(f_);
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  DPT_REQUIRE(f_ != nullptr, ExitCode::kUsage, "--metrics: cannot create '" + path + "'");
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& event) {
  if (!f_) return;
  const std::string line = event.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

const char* phase_event_name(Phase p) {
  switch (p) {
    case Phase::kData:
      return "wait for data";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kComm:
      return "all-reduce wait";
    case Phase::kOptimizer:
    case Phase::kCount:
      break;
  }
  return "optimizer";
}

nlohmann::json PhaseTimer::per_step_json(double steps) const {
  static const char* const kNames[] = {"data", "forward", "backward", "comm", "optimizer"};
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    const double v = steps > 0 ? ms_[i] / steps : 0.0;
    j[kNames[i]] = std::round(v * 1000.0) / 1000.0;
  }
  return j;
}

}  // namespace dptrain
