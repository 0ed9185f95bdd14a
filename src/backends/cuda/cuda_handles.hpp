// Implements: RAII owners of the CUDA handles the backend and the NCCL
// communicator hold — stream, event, device and pinned host memory, cuBLAS
// handle. Non-copyable; a move leaves the source null (std::exchange);
// destructors never throw (a failing release at shutdown is ignored: there is
// nobody left to tell, and throwing would terminate).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {

class Stream {
 public:
  Stream() = default;
  // Non-blocking: our work never serializes with the legacy default stream
  // that libraries or other code in the process might use.
  static Stream create() {
    Stream s;
    DPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
    return s;
  }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (s_) cudaStreamDestroy(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  // Timing off: these events only order streams, and timing ones cost more.
  static Event create() {
    Event e;
    DPT_CUDA_CHECK(cudaEventCreateWithFlags(&e.e_, cudaEventDisableTiming));
    return e;
  }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (e_) cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  // With timing, for cudaEventElapsedTime (phase times on the device).
  static Event create_timed() {
    Event e;
    DPT_CUDA_CHECK(cudaEventCreate(&e.e_));
    return e;
  }
  cudaEvent_t get() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Raw device bytes (scratch space; arenas go through Backend::allocate).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes) : bytes_(bytes) {
    if (bytes) DPT_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DeviceMemory() {
    if (p_) cudaFree(p_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  // bytes of device memory, or none when the device has no room for them
  // (that error cleared: CUDA also records it as the last error, which the
  // next launch check would report); any other failure throws.
  static DeviceMemory try_allocate(std::size_t bytes) {
    DeviceMemory m;
    if (!bytes) return m;
    const cudaError_t rc = cudaMalloc(&m.p_, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      m.p_ = nullptr;
      return m;
    }
    DPT_CUDA_CHECK(rc);
    m.bytes_ = bytes;
    return m;
  }
  void* get() const noexcept { return p_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory: small device-to-host results (counts) copy
// without a staging bounce.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  explicit PinnedMemory(std::size_t bytes) {
    if (bytes) DPT_CUDA_CHECK(cudaMallocHost(&p_, bytes));
  }
  ~PinnedMemory() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  PinnedMemory(PinnedMemory&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFreeHost(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  void* get() const noexcept { return p_; }

 private:
  void* p_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() = default;
  static CublasHandle create() {
    CublasHandle h;
    DPT_CUBLAS_CHECK(cublas_api().cublasCreate_(&h.h_));
    return h;
  }
  ~CublasHandle() {
    if (h_) cublas_api().cublasDestroy_(h_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    if (this != &o) {
      if (h_) cublas_api().cublasDestroy_(h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  cublasHandle_t get() const noexcept { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace dptrain::cuda
