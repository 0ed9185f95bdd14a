// Implements: the launcher of the bf16 -> fp32 copy (bf16_copy.cu), apart
// from cudnn_context.hpp so that nvcc sees no C++20 header.
#pragma once

#include <cstddef>

#include "backends/cuda/kernels.hpp"

namespace dptrain::cuda {

// y[i] = float(x[i]) on l.stream; x is __nv_bfloat16[n].
void from_bf16(const Launch& l, const void* x, float* y, std::size_t n);

}  // namespace dptrain::cuda
