// Implements: the bf16 -> fp32 copy that brings a bf16 convolution's result
// back to the fp32 tensors the layers exchange (every bf16 value is exact in
// fp32). The fp32 -> bf16 direction is cuda::to_bf16 (elementwise.cu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/cudnn/bf16_copy.hpp"
#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {
namespace {

__global__ void from_bf16_kernel(const __nv_bfloat16* x, float* y, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = __bfloat162float(x[i]);
}

}  // namespace

void from_bf16(const Launch& l, const void* x, float* y, std::size_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<grid_for(n, l), kThreads, 0, l.stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                              y, n);
  DPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dptrain::cuda
