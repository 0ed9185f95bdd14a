// Implements: the shared state of the cuDNN plans (cudnn_context.hpp) and
// the descriptor helpers.
#include "backends/cuda/cudnn/cudnn_context.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "dptrain/common/error.hpp"

namespace dptrain::cuda {

void GrowingBuffer::reserve(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= memory_.bytes()) return;
  DPT_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued passes may still use the old one
  memory_ = DeviceMemory();                       // free first: old and new need not fit at once
  memory_ = DeviceMemory(bytes);
}

bool GrowingBuffer::try_reserve(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= memory_.bytes()) return true;
  DPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::size_t held = memory_.bytes();
  memory_ = DeviceMemory();
  memory_ = DeviceMemory::try_allocate(bytes);
  if (memory_.get()) return true;
  memory_ = DeviceMemory(held);  // what was just freed fits again
  return false;
}

cudnnHandle_t CudnnContext::handle() {
  if (!handle_.get()) {
    CudnnHandle h;
    try {
      h = CudnnHandle::create();
    } catch (const Error& e) {
      // Most often a partial install: libcudnn.so loads its sub-libraries
      // from its own directory only when asked for the first handle.
      throw Error(e.code(),
                  std::string(e.what()) +
                      "; cuDNN's sub-libraries (libcudnn_cnn, libcudnn_ops, the "
                      "engine libraries) must lie beside libcudnn",
                  e.where());
    }
    DPT_CUDNN_CHECK(cudnnSetStream(h.get(), launch_.stream));
    handle_ = std::move(h);
  }
  return handle_.get();
}

void note_once(NoteTopic topic, const std::string& text) {
  static std::array<std::once_flag, 2> said;
  std::call_once(said.at(static_cast<std::size_t>(topic)),
                 [&] { std::fprintf(stderr, "dptrain: note: %s\n", text.c_str()); });
}

TensorDescriptor activation_descriptor(int rows, int channels, int dims, const SpatialExtent& e,
                                       cudnnDataType_t type) {
  std::vector<int> shape{rows, channels};
  std::string extent;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(e[static_cast<std::size_t>(d)]);
    if (d) extent += 'x';
    extent += std::to_string(shape.back());
  }
  // cuDNN's descriptors take int sizes and strides: a tensor holds at most
  // 2^31 - 1 values (in 64 bits here, so the check cannot overflow itself).
  std::vector<int> strides(shape.size(), 1);
  std::int64_t values = shape.back();
  for (std::size_t i = shape.size() - 1; i-- > 0;) {
    strides[i] = static_cast<int>(values);
    values *= shape[i];
    if (values > std::numeric_limits<int>::max())
      throw Error(ExitCode::kUsage,
                  "a convolution or pooling tensor of " + std::to_string(rows) + " rows x " +
                      std::to_string(channels) + " channels x " + extent +
                      " has more than 2^31 - 1 values, the most a cuDNN tensor holds; use "
                      "fewer rows per GPU (--batch) or smaller inputs");
  }
  TensorDescriptor t = TensorDescriptor::create();
  DPT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(t.get(), type, static_cast<int>(shape.size()),
                                             shape.data(), strides.data()));
  return t;
}

TensorDescriptor channel_descriptor(int channels, int dims) {
  SpatialExtent ones{1, 1, 1};
  return activation_descriptor(1, channels, dims, ones, CUDNN_DATA_FLOAT);
}

std::string cudnn_version() {
  // 9.x counts major * 10000 + minor * 100 + patch; 8.x counted major * 1000.
  const std::size_t v = cudnnGetVersion();
  const std::size_t major = v >= 90000 ? v / 10000 : v / 1000;
  const std::size_t minor = v >= 90000 ? v / 100 % 100 : v / 100 % 10;
  return "cuDNN " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(v % 100);
}

}  // namespace dptrain::cuda
