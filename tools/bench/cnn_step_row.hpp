// Implements: the cnn row of dptrain_bench (cnn_step_row.cpp): the demo
// CNN's training step on one rank against the library passes inside it
// (convolution and pooling plans, GEMMs), the GPU check's "CNN step vs bare
// cuDNN/cuBLAS layers" row (docs/gpu.md).
#pragma once

#include <string>

#include "bench_rows.hpp"
#include "dptrain/backends/backend.hpp"

namespace dptrain::bench {

// On be, the calling rank alone, as run says; where names the placement
// in the row's name; gpu: the row carries docs/gpu.md's target (>= 0.85).
Row cnn_step_row(Backend& be, const RowRun& run, const std::string& where, bool gpu);

}  // namespace dptrain::bench
