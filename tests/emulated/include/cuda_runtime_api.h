// Implements: see cuda_runtime.h (the host emulation has one header for both).
#pragma once

#include "cuda_runtime.h"
