// Implements: what the cuDNN plans of one backend share (internal to
// src/backends/cuda/cudnn/): the cuDNN handle on the backend's compute stream, made
// when the first plan is asked for (an MLP never pays for it), the
// precision, and the device buffers every pass borrows — the algorithms'
// workspace, the bf16 copies of the operands and the aligned fp32 copy of
// a weight or its gradient. Passes run one at a time
// on that one stream, so one set of buffers serves all plans; a buffer only
// grows, when a plan is made for a larger geometry or row count, never in a
// warmed-up step. Plus the descriptor helpers.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <string>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cudnn/cudnn_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain::cuda {

// Device memory that grows and never shrinks. Growing waits for the work
// queued on the stream first, which may still use the old buffer.
class GrowingBuffer {
 public:
  void reserve(std::size_t bytes, cudaStream_t stream);
  // As reserve, but false when the device has no room, the buffer as it was.
  bool try_reserve(std::size_t bytes, cudaStream_t stream);
  void* get() const noexcept { return memory_.get(); }
  std::size_t bytes() const noexcept { return memory_.bytes(); }

 private:
  DeviceMemory memory_;
};

class CudnnContext {
 public:
  CudnnContext(const Launch& l, Precision p) : launch_(l), precision_(p) {}

  cudnnHandle_t handle();  // made on first use, bound to launch().stream
  const Launch& launch() const noexcept { return launch_; }
  Precision precision() const noexcept { return precision_; }

  // The algorithms' workspace, and three bf16 operand copies (a pass's two
  // inputs and its output, in that order).
  GrowingBuffer& workspace() noexcept { return workspace_; }
  GrowingBuffer& bf16(int slot) { return bf16_.at(static_cast<std::size_t>(slot)); }
  // A weight (or its gradient) of the parameter arena, where its offset
  // leaves it less aligned than tensor-core kernels read (conv_plan.cpp).
  GrowingBuffer& aligned_weight() noexcept { return aligned_weight_; }

 private:
  Launch launch_;
  Precision precision_;
  CudnnHandle handle_;
  GrowingBuffer workspace_;
  std::array<GrowingBuffer, 3> bf16_;
  GrowingBuffer aligned_weight_;
};

// [rows, channels, (D,) H, W], dense row-major (cuDNN's packed NCHW / NCDHW).
TensorDescriptor activation_descriptor(int rows, int channels, int dims, const SpatialExtent& e,
                                       cudnnDataType_t type);
// [1, channels, 1, 1(, 1)]: a bias broadcast over rows and positions.
TensorDescriptor channel_descriptor(int channels, int dims);

// A note on stderr, the first time only in the process for its topic (a
// fallback would otherwise repeat for every layer and row count).
enum class NoteTopic { kBf16Fallback, kWorkspaceFallback };
void note_once(NoteTopic topic, const std::string& text);

// "cuDNN 9.19.0": the library loaded at run time.
std::string cudnn_version();

}  // namespace dptrain::cuda
