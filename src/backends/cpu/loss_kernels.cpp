// Implements: the CPU loss kernels — softmax cross-entropy (the vector row
// kernel of row_kernels.hpp) and mean squared error, summed in double per
// row so that the loss statistics are a tight reference for the CUDA kernels.
// A gradient's bf16 copy, where asked for, is rounded after the rows (the
// CPU's own GEMMs round inside, so training never asks for one here).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/row_kernels.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"

namespace dptrain {
namespace {

void round_gradient(const float* d, std::uint16_t* d16, int rows, int cols) {
  if (!d || !d16) return;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  for (std::size_t i = 0; i < n; ++i) d16[i] = bf16_bits(d[i]);
}

class CpuLossKernels final : public LossKernels {
 public:
  // dlogits may be null (evaluation needs only the stats). Rows in order,
  // on one thread: the loss sum keeps one order.
  void softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                    float grad_scale, float* dlogits, std::uint16_t* dlogits_bf16,
                    float* stats) override {
    double loss_sum = 0.0;
    std::int64_t correct = 0;
    cpu_rows::softmax_xent(logits, labels, 0, rows, cols, grad_scale, dlogits, &loss_sum,
                           &correct);
    round_gradient(dlogits, dlogits_bf16, rows, cols);
    stats[0] += static_cast<float>(loss_sum);
    stats[1] += static_cast<float>(correct);
  }

  // A row at a time: expanded to fp32, the row kernel above, the gradient
  // rounded back (in place when dlogits16 is logits16).
  void softmax_xent_bf16(const std::uint16_t* logits16, const std::int32_t* labels, int rows,
                         int cols, float grad_scale, std::uint16_t* dlogits16,
                         float* stats) override {
    double loss_sum = 0.0;
    std::int64_t correct = 0;
    std::vector<float> row(static_cast<std::size_t>(cols > 0 ? cols : 0));
    for (int r = 0; r < rows; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
      for (int c = 0; c < cols; ++c)
        row[std::size_t(c)] = bf16_value(logits16[base + std::size_t(c)]);
      cpu_rows::softmax_xent(row.data(), labels + r, 0, 1, cols, grad_scale,
                             dlogits16 ? row.data() : nullptr, &loss_sum, &correct);
      if (dlogits16) round_gradient(row.data(), dlogits16 + base, 1, cols);
    }
    stats[0] += static_cast<float>(loss_sum);
    stats[1] += static_cast<float>(correct);
  }

  // dpred may be null (evaluation needs only the stats).
  void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
           float* dpred, std::uint16_t* dpred_bf16, float* stats) override {
    double loss_sum = 0.0;
    const float g = cols > 0 ? grad_scale * 2.0f / static_cast<float>(cols) : 0.0f;
    for (int r = 0; r < rows; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * cols;
      double row_sum = 0.0;
      for (int c = 0; c < cols; ++c) {
        const float diff = pred[base + c] - target[base + c];
        row_sum += static_cast<double>(diff) * diff;
        if (dpred) dpred[base + c] = g * diff;
      }
      if (cols > 0) loss_sum += row_sum / cols;
    }
    round_gradient(dpred, dpred_bf16, rows, cols);
    stats[0] += static_cast<float>(loss_sum);
  }
};

}  // namespace

template <>
std::unique_ptr<LossKernels> make_cpu_kernels<LossKernels>() {
  return std::make_unique<CpuLossKernels>();
}

}  // namespace dptrain
