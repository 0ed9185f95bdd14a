// Implements: the dense peak of a GPU at a precision, from a table of device
// names, for train events' `mfu` (docs/design.md section 5) when
// --peak-tflops does not name one.
#pragma once

#include <string>

#include "dptrain/backends/backend_factory.hpp"

namespace dptrain {

// The datasheet's dense peak (no structured sparsity) in TFLOPS of the
// device that CUDA calls `device_name` ("NVIDIA H200"), for the arithmetic
// `precision` runs its GEMMs in: bf16 and tf32 on tensor cores, fp32 on the
// CUDA cores. 0 where the table does not know the device: parts whose
// clocks and power limits vary (PCIe, NVL) are left out rather than guessed.
double dense_peak_tflops(const std::string& device_name, Precision precision);

// "989.4 TFLOPS (NVIDIA H200, bf16 dense)" or why none is known, for the
// start-up summary; `given` > 0 is a --peak-tflops value.
std::string describe_peak(const std::string& device_name, Precision precision, double given);

}  // namespace dptrain
