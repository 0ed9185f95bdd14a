// Implements: the CPU dense kernels — bias add and bias gradient as vector
// loops over rows (src/backends/cpu/vector_clones.hpp), bitwise the same on every
// instruction set.
#include <algorithm>
#include <cstddef>
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"

namespace dptrain {
namespace {

DPT_VECTOR_CLONES
void add_bias_rows(float* __restrict y, const float* __restrict bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = y + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

DPT_VECTOR_CLONES
void add_bias_and_rows(float* __restrict y, const float* __restrict bias,
                       const float* __restrict add, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) y[at + c] = (y[at + c] + bias[c]) + add[at + c];
  }
}

// Rows are added in order, each column on its own: vectorising across
// columns keeps every column's sum in row order.
DPT_VECTOR_CLONES
void sum_rows(const float* __restrict dy, float* __restrict db, int rows, int cols) {
  std::fill_n(db, cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* __restrict row = dy + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) db[c] += row[c];
  }
}

class CpuDenseKernels final : public DenseKernels {
 public:
  void add_bias(float* y, const float* bias, int rows, int cols) override {
    add_bias_rows(y, bias, rows, cols);
  }
  void add_bias_and(float* y, const float* bias, const float* add, int rows, int cols) override {
    add_bias_and_rows(y, bias, add, rows, cols);
  }

  void bias_grad(const float* dy, float* db, int rows, int cols) override {
    sum_rows(dy, db, rows, cols);
  }
  // Never asked for in training (the CPU keeps no bf16 tensors); the rows
  // in order, as sum_rows.
  void bias_grad_bf16(const std::uint16_t* dy, float* db, int rows, int cols) override {
    for (int c = 0; c < cols; ++c) db[c] = 0.0f;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) db[c] += bf16_value(dy[std::size_t(r) * cols + c]);
  }
};

}  // namespace

template <>
std::unique_ptr<DenseKernels> make_cpu_kernels<DenseKernels>() {
  return std::make_unique<CpuDenseKernels>();
}

}  // namespace dptrain
