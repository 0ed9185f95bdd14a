// Implements: the untyped allocation and release behind BackendBuffer (see
// dptrain/backends/backend_buffer.hpp).
#include "dptrain/backends/backend_buffer.hpp"

namespace dptrain {

void* allocate_backend_memory(Backend& be, MemoryKind kind, std::size_t bytes) {
  if (kind == MemoryKind::kHost) return be.allocate_host(bytes);
  void* p = be.allocate(bytes);
  if (p) be.count_buffer(bytes, true);
  return p;
}

void free_backend_memory(Backend& be, MemoryKind kind, void* p, std::size_t bytes) noexcept {
  if (kind == MemoryKind::kHost) {
    be.deallocate_host(p);
    return;
  }
  be.deallocate(p);
  be.count_buffer(bytes, false);
}

}  // namespace dptrain
