// Implements: launch_state.hpp, and the parts of device_emulator.hpp that
// are state rather than scheduling: the launch error (the first one is
// kept until cudaGetLastError takes it), the counts of launches (in all
// and by kernel) and of runtime calls, the emulated multiprocessors
// (DPTRAIN_EMULATED_SMS) and the scheduler's order (DPTRAIN_EMULATED_ORDER).
#include "launch_state.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace dptrain_emu {
namespace {

std::mutex g_mutex;  // the error and the launch counts (the kernels run on one host thread)
cudaError_t g_error = cudaSuccess;
std::string g_detail = "no error";
std::size_t g_launches = 0;
std::map<std::string, std::size_t> g_by_kernel;  // the name as launched, template arguments cut
std::atomic<std::size_t> g_calls[static_cast<int>(RuntimeCall::kCount)];
// cudaFuncAttributeMaxDynamicSharedMemorySize by kernel, where it was set.
std::map<const void*, std::size_t> g_max_dynamic_shared;

Order order_from_environment() {
  const char* v = std::getenv("DPTRAIN_EMULATED_ORDER");
  const std::string order = v ? v : "forward";
  if (order != "forward" && order != "reverse") {
    std::fprintf(stderr, "DPTRAIN_EMULATED_ORDER=%s: expected forward or reverse\n", v);
    std::abort();
  }
  return order == "reverse" ? Order::kReverse : Order::kForward;
}

std::atomic<Order> g_order{order_from_environment()};

std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

bool configuration_is_valid(dim3 grid, dim3 block, const char* kernel) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  const bool block_ok =
      threads >= 1 && threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64;
  const bool grid_ok = grid.x >= 1 && grid.x <= 0x7fffffffu && grid.y >= 1 && grid.y <= 65535 &&
                       grid.z >= 1 && grid.z <= 65535;
  if (block_ok && grid_ok) return true;
  set_error(cudaErrorInvalidConfiguration, std::string(kernel) + ": grid " + dims(grid) +
                                               " of blocks " + dims(block) +
                                               " is not a valid launch configuration");
  return false;
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<std::size_t>(bytes) > kOptInSharedBytes)
    return cudaErrorInvalidValue;
  const std::lock_guard lock(g_mutex);
  g_max_dynamic_shared[kernel] = static_cast<std::size_t>(bytes);
  return cudaSuccess;
}

bool dynamic_shared_allowed(const void* kernel, std::size_t bytes, const char* name) {
  std::size_t most = kDefaultSharedBytes;
  {
    const std::lock_guard lock(g_mutex);
    const auto at = g_max_dynamic_shared.find(kernel);
    if (at != g_max_dynamic_shared.end()) most = at->second;
  }
  if (bytes <= most) return true;
  set_error(cudaErrorInvalidValue,
            std::string(name) + ": " + std::to_string(bytes) +
                " bytes of dynamic shared memory, over the kernel's " + std::to_string(most) +
                (most == kDefaultSharedBytes
                     ? " (more needs cudaFuncAttributeMaxDynamicSharedMemorySize)"
                     : " (its cudaFuncAttributeMaxDynamicSharedMemorySize)"));
  return false;
}

void name_failed_block(const char* kernel, uint3 block) {
  const std::lock_guard lock(g_mutex);
  g_detail = std::string(kernel) + ", block " + dims(dim3(block.x, block.y, block.z)) + ": " +
             g_detail;
}

void count_launch(const char* kernel) {
  const std::string name(kernel);
  const std::lock_guard lock(g_mutex);
  ++g_launches;
  ++g_by_kernel[name.substr(0, name.find('<'))];
}

bool reverse_order() { return g_order.load() == Order::kReverse; }

Order set_order(Order o) { return g_order.exchange(o); }

void set_error(cudaError_t err, const std::string& detail) {
  const std::lock_guard lock(g_mutex);
  if (g_error != cudaSuccess) return;  // the first error is the one to read
  g_error = err;
  g_detail = detail;
}

cudaError_t take_error() {
  const std::lock_guard lock(g_mutex);
  return std::exchange(g_error, cudaSuccess);
}

const char* error_detail() {
  const std::lock_guard lock(g_mutex);
  return g_detail.c_str();
}

int multiprocessors() {
  const char* v = std::getenv("DPTRAIN_EMULATED_SMS");
  const int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : 1;
}

std::size_t launches() {
  const std::lock_guard lock(g_mutex);
  return g_launches;
}

std::map<std::string, std::size_t> launches_by_kernel() {
  const std::lock_guard lock(g_mutex);
  return g_by_kernel;
}

void count_call(RuntimeCall c) { ++g_calls[static_cast<int>(c)]; }
std::size_t calls(RuntimeCall c) { return g_calls[static_cast<int>(c)].load(); }

}  // namespace dptrain_emu
