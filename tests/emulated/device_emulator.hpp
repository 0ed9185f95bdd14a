// Implements: a host emulation of CUDA's execution model, so that the CUDA
// kernels of src/backends/cuda/ (this project's own code, unlike cuBLAS, cuDNN or
// NCCL) run and are tested on a machine without a GPU. The .cu files are
// compiled as C++ against the headers of include/ after
// translate_launches.py has turned each kernel<<<grid, block, 0, s>>>(args)
// into dptrain_emu::Launcher("kernel", grid, block, 0, s)(kernel, args).
//
// The model. A launch checks its configuration as CUDA does (at most 1024
// threads a block, grid.y and grid.z at most 65535, no empty dimension; in
// the translated sources, no more than the kernel's __launch_bounds__) and
// that every pointer argument is null or points into memory from
// cudaMalloc; a bad launch runs nothing and is reported by
// cudaGetLastError. Then, when its stream gets to the launch (streams.hpp),
// the blocks run one after another; the threads of a
// block are fibers on one host thread, each run until it reaches a
// __syncthreads, a warp shuffle or __syncwarp, or its end, in thread order. So a block
// barrier lets nobody on before every live thread of the block has arrived,
// and a missing barrier shows as the worst ordering: thread 0 runs ahead of
// everyone. DPTRAIN_EMULATED_ORDER=reverse runs the blocks of a grid and
// the threads of a block last to first instead: between two barriers,
// every pair of threads then meets in the other order too, so a test run
// both ways catches a race whichever thread it needs to run first. A
// shuffle exchanges values among the 32 lanes of a warp; it is
// an error when a lane of the warp has ended or waits elsewhere (the
// full-mask shuffles of src/backends/cuda/ need all 32), or reads a lane that does
// not exist. A block whose threads can no longer move is a deadlock. Each
// such kernel error abandons the launch and is reported by
// cudaGetLastError, naming what happened. __shared__ variables are statics,
// shared by the threads of the block; in the translated sources
// (translate_launches.py) the first thread of a block to reach one's
// declaration fills it with all-ones bytes (fresh_shared), so a block that
// reads shared memory it did not write reads NaN (or -1), where a GPU
// would give whatever was there.
//
// Device memory from cudaMalloc starts as all-ones bytes (float NaN), so a
// kernel that reads scratch it never wrote gives NaN rather than zeros.
// Explicitly rounded intrinsics (__fmul_rn, __dadd_rn, ...) are one IEEE
// operation each; the emulated sources are built with -ffp-contract=off, so
// no other a*b+c is fused either. Math functions (expf, erff, tanhf) are
// the host's, which are within CUDA's documented ulp bounds of the exact
// value but not CUDA's bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "streams.hpp"

// --- qualifiers ------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Set by the emulator before it resumes a thread of a block.
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

// --- runtime types and error codes ------------------------------------------
typedef enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
} cudaError_t;
typedef enum {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;
constexpr unsigned cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2;

namespace dptrain_emu {

// The launch's thread body: the kernel called with its own copy of the
// arguments.
using ThreadBody = std::function<void()>;

// The order of the block scheduler: DPTRAIN_EMULATED_ORDER's (forward
// unless it says reverse) until set_order, which returns the one before.
enum class Order { kForward, kReverse };
Order set_order(Order o);

// Runs body for every thread of the grid (or records why it cannot) and
// returns when all have finished; kernel names a launch in error messages.
// Each block gets dynamic_shared bytes of dynamic shared memory
// (dynamic_shared()).
void run_grid(dim3 grid, dim3 block, const char* kernel, const ThreadBody& body,
              std::size_t dynamic_shared = 0);
// Shared memory a block may take, as on an H100 or H200: 48 KiB, or up to
// 227 KiB of dynamic shared memory for a kernel whose
// cudaFuncAttributeMaxDynamicSharedMemorySize allows it.
constexpr std::size_t kDefaultSharedBytes = 48 * 1024, kOptInSharedBytes = 227 * 1024;
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
// bytes): cudaErrorInvalidValue beyond kOptInSharedBytes.
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);
// Whether a launch of kernel (named name) may take bytes of dynamic shared
// memory; if not, records cudaErrorInvalidValue naming the kernel.
bool dynamic_shared_allowed(const void* kernel, std::size_t bytes, const char* name);
// Records err with its detail as the launch error cudaGetLastError returns.
void set_error(cudaError_t err, const std::string& detail);
cudaError_t take_error();
const char* error_detail();
// Whether p is null or within (or one past) a live cudaMalloc block.
bool is_device_pointer(const void* p);
// Whether [p, p + bytes) lies inside one device allocation.
bool is_device_range(const void* p, std::size_t bytes);
// nullptr when the emulated device has no room: its memory is
// DPTRAIN_EMULATED_DEVICE_BYTES (16 GiB unless set), read at every call.
void* device_allocate(std::size_t bytes);
std::size_t device_capacity();
std::size_t device_bytes_in_use();
void device_free(void* p);
// Kernel launches that ran since the start (tests of the emulator itself),
// and by kernel: the name as launched, up to its template arguments
// ("fused_forward_kernel"); a test takes the difference over the work it
// checks (tests/gpu/test_step_kernels.cpp: the kernels of a GPT step). A
// launch recorded in a stream capture (graphs.hpp) counts each time a graph
// launch of it runs, not when it is recorded.
std::size_t launches();
std::map<std::string, std::size_t> launches_by_kernel();
// cudaGraphLaunch calls since the start (graphs.hpp), counted when called.
std::size_t graph_launches();

// Calls of the emulated runtime (include/cuda_runtime.h) that allocate, or
// that make the host wait for the device, counted on every thread since the
// start: a test reads them before and after the work it checks (a warmed-up
// training step allocates nothing and waits only where it must, e.g.
// tests/gpu/test_gpt_step.cpp).
enum class RuntimeCall {
  kMalloc,        // cudaMalloc (failed ones too)
  kHostAlloc,     // cudaHostAlloc, cudaMallocHost
  kFree,          // cudaFree, cudaFreeHost (each also waits for the whole device)
  kStreamSync,    // cudaStreamSynchronize, cudaStreamQuery (which runs the stream here)
  kEventSync,     // cudaEventSynchronize
  kDeviceSync,    // cudaDeviceSynchronize
  kBlockingCopy,  // a copy into pageable host memory: returns once it has landed
  kCount
};
void count_call(RuntimeCall c);
std::size_t calls(RuntimeCall c);

// The block barrier of the thread now running, at a __syncthreads of the
// source (threads released together must wait at the same one).
void sync_block(const char* file, int line);
// Stores v as this lane's value, waits for the warp, and returns lane
// src's value (src from source(lane)), or v where source says so (-1).
std::uint64_t exchange_in_warp(std::uint64_t v, int (*source)(int lane, int arg, int width),
                               int arg, int width);
// Stores v as this lane's value, waits for the warp, and returns the OR of
// every lane's value (a ballot's gather, in one exchange).
std::uint64_t or_in_warp(std::uint64_t v);
// Fills the shared variable at p with all-ones bytes, unless the block now
// running has done so already (translate_launches.py puts a call after
// each __shared__ declaration).
void fresh_shared(void* p, std::size_t bytes);
// The dynamic shared memory of the block now running (translate_launches.py
// turns `extern __shared__ T name[];` into a pointer to it): the launch's
// bytes exactly, 128-byte aligned, filled with all-ones bytes when the
// first thread of the block asks for it.
void* dynamic_shared();
// Fails the launch with cudaErrorLaunchOutOfResources, as a GPU refuses
// it, when its blocks have more threads than max_threads, the kernel's
// __launch_bounds__ (translate_launches.py puts the call first in each
// kernel that declares them).
void within_launch_bounds(unsigned max_threads);
// Whether the thread now running is the last of its warp's lanes that the
// scheduler resumes (the highest lane, or the lowest in reverse order).
bool runs_last_in_warp();

template <typename T>
std::uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}
template <typename T>
T from_bits(std::uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// CUDA converts each argument to its parameter's type; a pointer argument
// must be device memory.
class Launcher {
 public:
  Launcher(const char* name, dim3 grid, dim3 block, std::size_t shared_bytes = 0,
           cudaStream_t stream = nullptr)
      : name_(name), grid_(grid), block_(block), shared_bytes_(shared_bytes), stream_(stream) {}

  template <typename... P, typename... A>
  void operator()(void (*kernel)(P...), A&&... args) const {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
    if (!dynamic_shared_allowed(reinterpret_cast<const void*>(kernel), shared_bytes_, name_))
      return;
    if (!pointers_are_device(params, std::index_sequence_for<P...>{})) return;
    // The grid runs when its stream gets to it, on the arguments as launched.
    enqueue(stream_, [grid = grid_, block = block_, name = name_, shared = shared_bytes_, params,
                      kernel] {
      run_grid(
          grid, block, name,
          [&params, kernel] {
            std::tuple<std::decay_t<P>...> own = params;  // each thread's copy
            std::apply(kernel, own);
          },
          shared);
    });
  }

 private:
  template <typename Tuple, std::size_t... I>
  bool pointers_are_device(const Tuple& t, std::index_sequence<I...>) const {
    bool ok = true;
    ((ok = ok && pointer_is_device(std::get<I>(t), I)), ...);
    return ok;
  }
  template <typename T>
  bool pointer_is_device(const T& v, std::size_t index) const {
    if constexpr (std::is_pointer_v<T>) {
      if (!is_device_pointer(v)) {
        set_error(cudaErrorInvalidValue, std::string(name_) + ": argument " +
                                             std::to_string(index) +
                                             " is a pointer to host memory, not to device memory");
        return false;
      }
    }
    return true;
  }

  const char* name_;
  dim3 grid_, block_;
  std::size_t shared_bytes_;
  cudaStream_t stream_;
};

}  // namespace dptrain_emu

// --- device intrinsics -------------------------------------------------------
// A macro, so that the barrier knows its source line, which compilers do not
// duplicate the way they may duplicate a call.
#define __syncthreads() ::dptrain_emu::sync_block(__FILE__, __LINE__)

namespace dptrain_emu {
inline int down_source(int lane, int delta, int width) {
  return (lane % width) + delta < width ? lane + delta : -1;
}
// Each lane keeps its own value: an exchange that only waits for the warp.
inline int own_value(int, int, int) { return -1; }
inline int xor_source(int lane, int mask, int width) {
  const int src = lane ^ mask;
  return src / width == lane / width ? src : -1;
}
// The shuffles of src/backends/cuda/: every lane of the warp, over the whole warp.
inline void check_shuffle(unsigned mask, int width) {
  if (mask != 0xffffffffu || width != 32)
    set_error(cudaErrorLaunchFailure, "only full-warp, full-mask shuffles are emulated");
}
}  // namespace dptrain_emu

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  dptrain_emu::check_shuffle(mask, width);
  return dptrain_emu::from_bits<T>(dptrain_emu::exchange_in_warp(
      dptrain_emu::to_bits(v), dptrain_emu::down_source, static_cast<int>(delta), width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  dptrain_emu::check_shuffle(mask, width);
  return dptrain_emu::from_bits<T>(dptrain_emu::exchange_in_warp(
      dptrain_emu::to_bits(v), dptrain_emu::xor_source, lane_mask, width));
}
// Bit l of the result set where lane l's predicate is (lane l's place is
// its flat thread index modulo 32, as a warp's lanes are on a GPU).
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  dptrain_emu::check_shuffle(mask, 32);
  const unsigned flat = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return static_cast<unsigned>(
      dptrain_emu::or_in_warp(predicate ? std::uint64_t{1} << (flat % 32) : 0));
}
// Returns once every lane of the warp has arrived here (a full mask only):
// a lane that ended or waits elsewhere is a launch error, as for a shuffle.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  dptrain_emu::check_shuffle(mask, 32);
  dptrain_emu::exchange_in_warp(0, dptrain_emu::own_value, 0, 32);
}
// 1 + the index of the lowest set bit, 0 for none.
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
// The blocks of a grid run one after another, each to its end: every write
// of an earlier block is visible to a later one without a fence.
inline void __threadfence() {}
// Fibers of one host thread never run at the same time: a plain add is atomic.
template <typename T>
T atomicAdd(T* address, T v) {
  const T old = *address;
  *address = old + v;
  return old;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
