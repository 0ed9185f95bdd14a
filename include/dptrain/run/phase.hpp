// Implements: what the main thread is doing (phase and step), named in error
// messages and by the watchdog.
#pragma once

#include <cstdint>
#include <string>

namespace dptrain {

// What the main thread is doing, for error messages: set_phase("forward",
// step) in the step loop; phase_note() gives " [phase forward, step 12]" or
// "" before the loop. phase must be a string literal.
void set_phase(const char* phase, std::uint64_t step);
std::string phase_note();

}  // namespace dptrain
