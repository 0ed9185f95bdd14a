// Implements: the emulator's state beside its block scheduler
// (device_emulator.cpp), for that file alone: a launch's configuration
// check, the name of the kernel and block a failed launch's error gets, the
// count of launches, and the scheduler's order. The rest of that state
// (the launch error, the runtime calls' counts, the multiprocessors) is
// declared in device_emulator.hpp; launch_state.cpp defines both.
#pragma once

#include "device_emulator.hpp"

namespace dptrain_emu {

// Whether a launch of grid × block may run, as CUDA checks it; if not,
// records cudaErrorInvalidConfiguration naming the kernel.
bool configuration_is_valid(dim3 grid, dim3 block, const char* kernel);
// Puts "kernel, block (x,y,z): " in front of the recorded error's detail.
void name_failed_block(const char* kernel, uint3 block);
// Counts a launch of `kernel` that ran to its end (launches(),
// launches_by_kernel()).
void count_launch(const char* kernel);
// Whether the scheduler runs blocks and threads last to first (set_order).
bool reverse_order();

}  // namespace dptrain_emu
