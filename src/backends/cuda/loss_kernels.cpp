// Implements: the CUDA loss kernel table — softmax cross-entropy and MSE on
// the compute stream (loss.cu), with the device scratch of their per-block
// partial sums and the count of blocks arrived, allocated once with the
// table.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/scratch.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaLossKernels final : public LossKernels {
 public:
  explicit CudaLossKernels(const Launch& l)
      : launch_(l), partials_(2 * kMaxLossBlocks * sizeof(double)), arrivals_(l.stream, 1) {}

  // dlogits / dpred may be null (evaluation), as on the CPU backend.
  void softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                    float grad_scale, float* dlogits, std::uint16_t* dlogits_bf16,
                    float* stats) override {
    cuda::softmax_xent(launch_, logits, labels, rows, cols, grad_scale, dlogits, dlogits_bf16, stats,
                       scratch());
  }
  void softmax_xent_bf16(const std::uint16_t* logits16, const std::int32_t* labels, int rows,
                         int cols, float grad_scale, std::uint16_t* dlogits16,
                         float* stats) override {
    cuda::softmax_xent_bf16(launch_, logits16, labels, rows, cols, grad_scale, dlogits16, stats,
                            scratch());
  }
  void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
           float* dpred, std::uint16_t* dpred_bf16, float* stats) override {
    cuda::mse(launch_, pred, target, rows, cols, grad_scale, dpred, dpred_bf16, stats, scratch());
  }

 private:
  LossScratch scratch() { return {static_cast<double*>(partials_.get()), arrivals_.get(1)}; }

  Launch launch_;
  DeviceMemory partials_;  // 2 * kMaxLossBlocks doubles
  ArrivalCounts arrivals_;
};

}  // namespace

template <>
std::unique_ptr<LossKernels> make_kernels<LossKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaLossKernels>(l);
}

}  // namespace dptrain::cuda
