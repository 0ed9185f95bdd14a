// Implements: the cnn row of dptrain_bench (cnn_step_row.cpp): the demo
// CNN's training step on one rank against the library passes inside it
// (convolution and pooling plans, GEMMs), the GPU check's "CNN step vs bare
// cuDNN/cuBLAS layers" row (docs/gpu.md).
#pragma once

#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "dptrain/backends/backend.hpp"

namespace dptrain::bench {

// On be, the calling rank alone, as run says; where names the placement
// in the rows' names. gpu: the step row carries docs/gpu.md's target (>=
// 0.85), and a second row follows: the host's time to queue the step's
// forward and backward against the device's time to run them.
std::vector<Row> cnn_step_rows(Backend& be, const RowRun& run, const std::string& where,
                               bool gpu);

}  // namespace dptrain::bench
