// Implements: owning buffers of a Backend's memory — device memory
// (Backend::allocate, counted in Backend::buffer_bytes) and host staging
// memory (Backend::allocate_host, pinned on CUDA) — freed through the
// backend that allocated them.
#pragma once

#include <cstddef>
#include <utility>

#include "dptrain/backends/backend.hpp"

namespace dptrain {

// Where a BackendBuffer lives: device memory (Backend::allocate) or host
// staging memory (Backend::allocate_host, pinned on CUDA).
enum class MemoryKind { kDevice, kHost };

// Owning buffer of T, allocated through a Backend. Non-copyable; a move
// leaves the source empty.
template <typename T, MemoryKind kKind>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, std::size_t count)
      : be_(&be), ptr_(static_cast<T*>(count ? allocate(be, count * sizeof(T)) : nullptr)),
        count_(count) {
    if (kKind == MemoryKind::kDevice && ptr_) be.count_buffer(count * sizeof(T), true);
  }
  ~BackendBuffer() { reset(); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer(BackendBuffer&& o) noexcept
      : be_(std::exchange(o.be_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = std::exchange(o.be_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  void reset() noexcept {
    if (ptr_ && be_) {
      if constexpr (kKind == MemoryKind::kDevice) {
        be_->deallocate(ptr_);
        be_->count_buffer(count_ * sizeof(T), false);
      } else {
        be_->deallocate_host(ptr_);
      }
    }
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }

 private:
  static void* allocate(Backend& be, std::size_t bytes) {
    if constexpr (kKind == MemoryKind::kDevice) return be.allocate(bytes);
    else return be.allocate_host(bytes);
  }

  Backend* be_ = nullptr;
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

template <typename T>
using DeviceBuffer = BackendBuffer<T, MemoryKind::kDevice>;
template <typename T>
using HostBuffer = BackendBuffer<T, MemoryKind::kHost>;

}  // namespace dptrain
