// Implements: device scratch a kernel table owns (internal to src/backends/cuda/):
// it grows to the largest request seen, normally on the first step, so the
// steady state allocates nothing; a smaller request reuses what is there.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {

class Scratch {
 public:
  // initial_bytes up front, so that the usual sizes never grow (a grow
  // waits for the stream, in the middle of a step).
  explicit Scratch(cudaStream_t stream, std::size_t initial_bytes = 0)
      : stream_(stream), memory_(initial_bytes) {}

  // At least count values of T, valid for work queued on the stream from
  // now on. Growing waits for the stream first: queued kernels may still
  // use the old block.
  template <typename T>
  T* get(std::size_t count) {
    const std::size_t bytes = count * sizeof(T);
    if (memory_.bytes() < bytes) {
      DPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      memory_ = DeviceMemory();
      memory_ = DeviceMemory(bytes);
    }
    return static_cast<T*>(memory_.get());
  }

 private:
  cudaStream_t stream_;
  DeviceMemory memory_;
};

}  // namespace dptrain::cuda
