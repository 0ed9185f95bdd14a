// Implements: device scratch a kernel table owns (internal to src/backends/cuda/):
// it grows to the largest request seen, normally on the first step, so the
// steady state allocates nothing; a smaller request reuses what is there.
// ArrivalCounts: the counters of kernels whose last block to finish adds
// the other blocks' partial sums (norm.cu, layer_norm.cu, loss.cu).
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

// Counters for blocks that count themselves as they finish, so that the last
// one of a group adds the group's partials: zero between launches, since
// that block sets its counter back. Grows, zeroed, to the largest request
// (growing waits for the stream first: queued kernels count in the old).
class ArrivalCounts {
 public:
  ArrivalCounts(cudaStream_t stream, std::size_t initial_counters) : stream_(stream) {
    grow(initial_counters);
  }

  // At least `counters` zeroed counters, for work queued from now on.
  unsigned* get(std::size_t counters) {
    if (counters > counters_) grow(counters);
    return static_cast<unsigned*>(memory_.get());
  }

 private:
  void grow(std::size_t counters) {
    DPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    memory_ = DeviceMemory();
    memory_ = DeviceMemory(counters * sizeof(unsigned));
    if (counters)
      DPT_CUDA_CHECK(cudaMemsetAsync(memory_.get(), 0, counters * sizeof(unsigned), stream_));
    counters_ = counters;
  }

  cudaStream_t stream_;
  DeviceMemory memory_;
  std::size_t counters_ = 0;
};

}  // namespace dptrain::cuda
