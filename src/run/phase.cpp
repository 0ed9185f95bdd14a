// Implements: set_phase and phase_note (see phase.hpp).
#include "dptrain/run/phase.hpp"

#include <atomic>

namespace dptrain {

namespace {
std::atomic<const char*> g_phase{nullptr};
std::atomic<std::uint64_t> g_step{0};
}  // namespace

void set_phase(const char* phase, std::uint64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  g_phase.store(phase, std::memory_order_relaxed);
}

std::string phase_note() {
  const char* p = g_phase.load(std::memory_order_relaxed);
  if (!p) return {};
  return std::string(" [phase ") + p + ", step " + std::to_string(g_step.load()) + "]";
}

}  // namespace dptrain
