// Implements: one scope for a stretch of the step loop (internal): it names
// the phase in error messages, arms the watchdog when the stretch waits on
// peers, and records a timeline event, so the loop says each once.
#pragma once

#include <cstdint>
#include <optional>

#include "dptrain/run/phase.hpp"
#include "dptrain/run/watchdog.hpp"
#include "dptrain/telemetry/timeline.hpp"

namespace dptrain {

class StepScope {
 public:
  struct Spec {
    const char* phase;                 // for errors: "[phase data, step 12]"
    const char* waits_for = nullptr;   // watchdog: what a hang here is waiting for
    const char* event = nullptr;       // timeline event name (main thread)
    const char* category = timeline_category::kIo;
  };
  // All strings must be literals.
  StepScope(Watchdog& watchdog, Timeline& timeline, std::uint64_t step, const Spec& spec) {
    set_phase(spec.phase, step);
    if (spec.waits_for) wait_.emplace(&watchdog, spec.waits_for, step);
    if (spec.event && timeline.enabled())
      event_.emplace(timeline, spec.event, spec.category, kTimelineMainThread,
                     static_cast<std::int64_t>(step));
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  std::optional<Watchdog::Wait> wait_;
  std::optional<Timeline::Scope> event_;
};

}  // namespace dptrain
