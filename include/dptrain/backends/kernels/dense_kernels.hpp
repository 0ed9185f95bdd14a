// Implements: the dense kernel family of a Backend (docs/design.md section 1): the
// bias of a fully connected layer, forward and backward. The matrix products
// themselves are Backend::gemm, shared with every family that needs one.
#pragma once

#include <cstdint>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// Row-major [rows, cols] tensors in the device memory of the owning backend.
class DenseKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "dense";

  // y[r, c] += bias[c] for r < rows.
  virtual void add_bias(float* y, const float* bias, int rows, int cols) = 0;
  // y[r, c] = (y[r, c] + bias[c]) + add[r, c] in one pass: the bias and a
  // block's shortcut (Backend::gemm_epilogue's kBiasAdd), the bits of
  // add_bias and then Backend::add. add may not alias y.
  virtual void add_bias_and(float* y, const float* bias, const float* add, int rows, int cols) = 0;
  // db[c] = sum_r dy[r, c]  (overwrites db; rows == 0 gives zeros). The
  // summation order is fixed, so the same inputs give the same bits.
  virtual void bias_grad(const float* dy, float* db, int rows, int cols) = 0;
  // The same over dy's bf16 values (bf16_value of each): the bias gradient
  // where only dy's rounding exists (the bf16 MLP's hidden gradient),
  // summed as the GEMM's epilogue sums it under bf16.
  virtual void bias_grad_bf16(const std::uint16_t* dy, float* db, int rows, int cols) = 0;
};

}  // namespace dptrain
