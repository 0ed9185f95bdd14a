// Implements: the CUDA augmentation kernel table — the shard is copied to a
// device scratch on the compute stream, then rebuilt from it by one launch
// (augment.cu): crops move pixels across the plane, so in place a thread
// could read a pixel another had already overwritten. The scratch grows to
// the largest shard once.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/scratch.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudaAugmentKernels final : public AugmentKernels {
 public:
  explicit CudaAugmentKernels(const Launch& l) : launch_(l), source_(l.stream) {}

  void apply(float* x, int rows, const AugmentGeometry& g, std::uint64_t seed,
             std::uint64_t epoch, std::uint64_t first_row) override {
    if (rows <= 0) return;
    const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(g.planes) *
                          static_cast<std::size_t>(g.height) * static_cast<std::size_t>(g.width);
    if (n == 0) return;
    float* source = source_.get<float>(n);
    DPT_CUDA_CHECK(cudaMemcpyAsync(source, x, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                   launch_.stream));
    augment(launch_, source, x, rows, g, seed, epoch, first_row);
  }

 private:
  Launch launch_;
  Scratch source_;  // a copy of the shard being augmented
};

}  // namespace

template <>
std::unique_ptr<AugmentKernels> make_kernels<AugmentKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaAugmentKernels>(l);
}

}  // namespace dptrain::cuda
