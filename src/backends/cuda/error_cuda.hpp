// Implements: check macros for CUDA runtime, cuBLAS and NCCL calls (internal
// to src/backends/cuda/ and src/backends/cuda/nccl_comm.cpp, so no CUDA header reaches the
// public headers). A failing call throws dptrain::Error naming the call, the
// library's error string and file:line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "backends/cuda/cublas_api.hpp"
#include "dptrain/common/error.hpp"

// A CUDA failure is a device or programming fault, not a peer's: exit 1.
#define DPT_CUDA_CHECK(call)                                                                 \
  do {                                                                                       \
    const cudaError_t dpt_cuda_rc_ = (call);                                                 \
    if (dpt_cuda_rc_ != cudaSuccess)                                                         \
      ::dptrain::throw_error(::dptrain::ExitCode::kOther,                                    \
                             std::string("CUDA call failed: ") + #call + ": " +              \
                                 cudaGetErrorName(dpt_cuda_rc_) + " (" +                     \
                                 cudaGetErrorString(dpt_cuda_rc_) + ")",                     \
                             __FILE__, __LINE__);                                            \
  } while (0)

#define DPT_CUBLAS_CHECK(call)                                                               \
  do {                                                                                       \
    const cublasStatus_t dpt_cublas_rc_ = (call);                                            \
    if (dpt_cublas_rc_ != CUBLAS_STATUS_SUCCESS) {                                           \
      const ::dptrain::cuda::CublasApi& dpt_api_ = ::dptrain::cuda::cublas_api();            \
      ::dptrain::throw_error(::dptrain::ExitCode::kOther,                                    \
                             std::string("cuBLAS call failed: ") + #call + ": " +            \
                                 dpt_api_.cublasGetStatusName_(dpt_cublas_rc_) + " (" +      \
                                 dpt_api_.cublasGetStatusString_(dpt_cublas_rc_) + ")",      \
                             __FILE__, __LINE__);                                            \
    }                                                                                        \
  } while (0)

// NCCL failures are communication failures (a peer died, the network broke,
// ranks disagree): exit 6, as docs/design.md section 6 asks.
#define DPT_NCCL_CHECK(call)                                                                 \
  do {                                                                                       \
    const ncclResult_t dpt_nccl_rc_ = (call);                                                \
    if (dpt_nccl_rc_ != ncclSuccess)                                                         \
      ::dptrain::throw_error(::dptrain::ExitCode::kComm,                                     \
                             std::string("NCCL call failed: ") + #call + ": " +              \
                                 ncclGetErrorString(dpt_nccl_rc_) + " (" +                   \
                                 ncclGetLastError(nullptr) + ")",                            \
                             __FILE__, __LINE__);                                            \
  } while (0)
