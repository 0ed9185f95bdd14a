// Implements: the part of the CUDA runtime API that src/cuda/'s own kernels
// and kernel tables use, for the host emulation of tests/emulated/ (see
// device_emulator.hpp): device memory is host memory that the emulator
// registers, streams and events are synchronous, and a kernel launch runs
// the whole grid before it returns. Nothing here talks to a GPU.
#pragma once

#include "device_emulator.hpp"
