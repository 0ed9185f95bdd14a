// Implements: the check macro of cuDNN calls and RAII owners of the cuDNN
// handle and descriptors (internal to src/backends/cuda/cudnn/), in the manner of
// cuda_handles.hpp: non-copyable, a move leaves the source null
// (std::exchange), destructors never throw.
#pragma once

#include <cudnn.h>

#include <string>
#include <utility>

#include "dptrain/common/error.hpp"

// A cuDNN failure is a device or programming fault, not a peer's: exit 1.
// The last error string carries cuDNN's own explanation (which descriptor
// it disliked), when it has one.
#define DPT_CUDNN_CHECK(call)                                                    \
  do {                                                                           \
    const cudnnStatus_t dpt_cudnn_rc_ = (call);                                  \
    if (dpt_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                   \
      ::dptrain::throw_error(::dptrain::ExitCode::kOther,                        \
                             std::string("cuDNN call failed: ") + #call + ": " + \
                                 cudnnGetErrorString(dpt_cudnn_rc_) +            \
                                 ::dptrain::cuda::cudnn_last_error(),            \
                             __FILE__, __LINE__);                                \
  } while (0)

namespace dptrain::cuda {

// " (cuDNN's last error message)", or empty when it has none.
inline std::string cudnn_last_error() {
  char text[512] = {};
#if CUDNN_MAJOR >= 9
  cudnnGetLastErrorString(text, sizeof text);
#endif
  return text[0] ? std::string(" (") + text + ")" : std::string();
}

// One cuDNN object of type T, made by Create and released by Destroy.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnOwner {
 public:
  CudnnOwner() = default;
  static CudnnOwner create() {
    CudnnOwner o;
    DPT_CUDNN_CHECK(Create(&o.h_));
    return o;
  }
  ~CudnnOwner() {
    if (h_) Destroy(h_);
  }
  CudnnOwner(const CudnnOwner&) = delete;
  CudnnOwner& operator=(const CudnnOwner&) = delete;
  CudnnOwner(CudnnOwner&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CudnnOwner& operator=(CudnnOwner&& o) noexcept {
    if (this != &o) {
      if (h_) Destroy(h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  T get() const noexcept { return h_; }

 private:
  T h_ = nullptr;
};

using CudnnHandle = CudnnOwner<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using TensorDescriptor =
    CudnnOwner<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnOwner<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnOwner<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
               cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = CudnnOwner<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                     cudnnDestroyPoolingDescriptor>;

}  // namespace dptrain::cuda
