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

// The untyped halves of BackendBuffer (backend_buffer.cpp): bytes of the
// kind's memory from the backend, device bytes counted in
// Backend::buffer_bytes while they are held.
void* allocate_backend_memory(Backend& be, MemoryKind kind, std::size_t bytes);
void free_backend_memory(Backend& be, MemoryKind kind, void* p, std::size_t bytes) noexcept;

// Owning buffer of T, allocated through a Backend. Non-copyable; a move
// leaves the source empty.
template <typename T, MemoryKind kKind>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, std::size_t count)
      : be_(&be),
        ptr_(static_cast<T*>(count ? allocate_backend_memory(be, kKind, count * sizeof(T))
                                   : nullptr)),
        count_(count) {}
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
    if (ptr_ && be_) free_backend_memory(*be_, kKind, ptr_, count_ * sizeof(T));
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }

 private:
  Backend* be_ = nullptr;
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

template <typename T>
using DeviceBuffer = BackendBuffer<T, MemoryKind::kDevice>;
template <typename T>
using HostBuffer = BackendBuffer<T, MemoryKind::kHost>;

}  // namespace dptrain
