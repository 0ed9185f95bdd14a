// Implements: the registry of emulated device memory (device_emulator.hpp):
// cudaMalloc's memory as host heap memory of the exact size, aligned as
// cudaMalloc aligns it, filled with NaN bytes, within the emulated device's
// capacity; and the checks that a pointer or a range is device memory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "address_ranges.hpp"
#include "device_emulator.hpp"

namespace dptrain_emu {
namespace {

constexpr std::size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee

std::mutex g_memory_mutex;  // the allocations may change on any host thread
AddressRanges g_allocations;

}  // namespace

bool is_device_pointer(const void* p) {
  if (!p) return true;
  const std::lock_guard lock(g_memory_mutex);
  return g_allocations.contains(p, true);
}

bool is_device_range(const void* p, std::size_t bytes) {
  const std::lock_guard lock(g_memory_mutex);
  return g_allocations.contains_range(p, bytes);
}

std::size_t device_capacity() {
  const char* v = std::getenv("DPTRAIN_EMULATED_DEVICE_BYTES");
  const long long n = v ? std::atoll(v) : 0;
  return n > 0 ? static_cast<std::size_t>(n) : std::size_t(16) << 30;
}

std::size_t device_bytes_in_use() {
  const std::lock_guard lock(g_memory_mutex);
  return g_allocations.total();
}

void* device_allocate(std::size_t bytes) {
  const std::size_t capacity = device_capacity();
  const std::lock_guard lock(g_memory_mutex);
  if (bytes > capacity - std::min(capacity, g_allocations.total())) return nullptr;
  void* p = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t(kDeviceAlignment),
                           std::nothrow);
  if (!p) return nullptr;
  std::memset(p, 0xff, bytes);  // float NaN: reading unwritten scratch shows
  g_allocations.add(p, bytes);
  return p;
}

void device_free(void* p) {
  if (!p) return;
  {
    const std::lock_guard lock(g_memory_mutex);
    g_allocations.remove(p);
  }
  ::operator delete(p, std::align_val_t(kDeviceAlignment));
}

}  // namespace dptrain_emu
