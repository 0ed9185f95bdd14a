// Implements: tests of the CUDA host emulation itself (device_emulator.hpp),
// so that what the emulated kernel tests pass on means something: every
// thread of a 3-D grid runs once with its own indices; a block barrier
// holds everyone until all arrive, and kernels without one come out wrong
// in one of the scheduler's two orders; shared memory, static and dynamic,
// is shared by a block, and what a block did not write of it reads as NaN
// (dynamic shared memory over 48 KiB only where the kernel opted in);
// shuffles exchange the lanes' values; and the faults a GPU would hang on,
// fault on or refuse — a barrier or shuffle in divergent code, a bad launch
// configuration, a host pointer as argument — are launch errors that name
// what happened.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_runtime.h"

namespace {

using dptrain_emu::Launcher;

constexpr int kBlock = 128;

template <typename T>
struct DeviceArray {
  explicit DeviceArray(std::size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> host() const { return std::vector<T>(p, p + n); }
  T* p = nullptr;
  std::size_t n;
};

__global__ void write_global_ids(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  out[id] += id + 1;  // += : a thread run twice shows
}

template <bool kWithBarriers>
__global__ void tree_sum(const int* x, int* out) {
  __shared__ int s[kBlock];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * kBlock + t];
  if (kWithBarriers) __syncthreads();
  for (int half = kBlock / 2; half > 0; half >>= 1) {
    if (t < half) s[t] += s[t + half];
    if (kWithBarriers) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Each thread reads its right neighbour's value, then overwrites its own;
// without the barrier between, a neighbour that runs first has overwritten
// the value before it is read (a write-after-read race).
template <bool kWithBarrier>
__global__ void read_right_then_overwrite(const int* x, int* out) {
  __shared__ int s[kBlock];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * kBlock + t];
  __syncthreads();
  const int right = t + 1 < kBlock ? s[t + 1] : 0;
  if (kWithBarrier) __syncthreads();
  s[t] = -1;
  out[blockIdx.x * kBlock + t] = right;
}

// Block 0 alone writes its shared row; every block reads it back, then
// writes and reads a second, through keep(): a second visit of a block to
// a shared declaration must not fill it again.
__device__ float keep(float v, bool write) {
  __shared__ float kept[kBlock];
  if (write) kept[threadIdx.x] = v;
  __syncthreads();
  return kept[threadIdx.x];
}

__global__ void read_shared_written_by_block_0(float* out, float* kept) {
  __shared__ float s[kBlock];
  const int t = threadIdx.x;
  if (blockIdx.x == 0) s[t] = static_cast<float>(t);
  __syncthreads();
  out[blockIdx.x * kBlock + t] = s[t];
  keep(static_cast<float>(blockIdx.x + t), true);
  kept[blockIdx.x * kBlock + t] = keep(0.0f, false);
}

// Sets the scheduler's order for a test's scope.
class InOrder {
 public:
  explicit InOrder(dptrain_emu::Order o) : before_(dptrain_emu::set_order(o)) {}
  ~InOrder() { dptrain_emu::set_order(before_); }
  InOrder(const InOrder&) = delete;
  InOrder& operator=(const InOrder&) = delete;

 private:
  dptrain_emu::Order before_;
};

__global__ void butterfly_sum(const double* x, double* out) {
  double v = x[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

__global__ void shift_down(const int* x, int* out, int delta) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], static_cast<unsigned>(delta));
}

__global__ void divergent_shuffle(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

// Both halves reach one barrier each, but not the same one.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 64) {
    out[threadIdx.x] = 1;
    __syncthreads();
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

// Each warp reverses its lanes' values through shared memory, a
// __syncwarp between the writes and the reads.
__global__ void reverse_in_warp(const int* x, int* out) {
  __shared__ int s[kBlock];
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncwarp();
  out[t] = s[t / 32 * 32 + 31 - t % 32];
}

__global__ void divergent_syncwarp(int* out) {
  if (threadIdx.x < 16) {
    __syncwarp();
    out[threadIdx.x] = 1;
  }
}

__global__ void early_exit_then_barrier(const int* x, int* out, int n) {
  __shared__ int s[kBlock];
  const int t = threadIdx.x;
  if (t >= n) return;  // exited threads do not hold a barrier back
  s[t] = x[t];
  __syncthreads();
  out[t] = s[n - 1 - t];
}

// Block 0 alone writes its dynamic shared memory (n floats); every block
// reads it back, and thread 0 the memory's alignment.
__global__ void dynamic_shared_rows(float* out, unsigned* misalignment, int n) {
  extern __shared__ __align__(32) float dyn[];
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = static_cast<float>(i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = dyn[i];
  if (threadIdx.x == 0) misalignment[blockIdx.x] = reinterpret_cast<std::uintptr_t>(dyn) % 128;
}

__global__ void touch(float* x) { x[threadIdx.x] = 1.0f; }

__global__ void __launch_bounds__(64) touch_bounded(float* x) { x[threadIdx.x] = 1.0f; }

std::string take_detail() {
  const cudaError_t e = cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

TEST(DeviceEmulator, EveryThreadOfA3dGridRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const std::size_t n = 3 * 2 * 2 * 8 * 4 * 2;
  DeviceArray<unsigned> out(n);
  cudaMemsetAsync(out.p, 0, n * sizeof(unsigned));
  const std::size_t before = dptrain_emu::launches();
  Launcher("write_global_ids", grid, block)(write_global_ids, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(dptrain_emu::launches(), before + 1);
  const auto got = out.host();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], i + 1) << "thread " << i;
}

// Each order of the scheduler hides one of two races and shows the other:
// the tree's (a read before the partner's store) needs a lower thread to run
// first, so it shows in forward order; read_right_then_overwrite's needs a
// higher one first, so it shows in reverse. A suite run both ways (the
// emulated_gpu_wide entry runs in reverse) catches both kinds.
TEST(DeviceEmulator, BarriersMakeKernelsRightAndEachOrderShowsARaceTheOtherHides) {
  constexpr int kBlocks = 3;
  constexpr int n = kBlocks * kBlock;
  DeviceArray<int> x(n), with(kBlocks), without(kBlocks), right(n), raced(n);
  std::vector<int> want_sums(kBlocks, 0), want_right(n, 0);
  for (int i = 0; i < n; ++i) {
    x.p[i] = (i * 37) % 101 - 50;
    want_sums[static_cast<std::size_t>(i / kBlock)] += x.p[i];
    if ((i + 1) % kBlock != 0) want_right[static_cast<std::size_t>(i)] = (i * 37 + 37) % 101 - 50;
  }
  for (const auto order : {dptrain_emu::Order::kForward, dptrain_emu::Order::kReverse}) {
    const bool forward = order == dptrain_emu::Order::kForward;
    SCOPED_TRACE(forward ? "forward order" : "reverse order");
    const InOrder in(order);
    Launcher("tree_sum<true>", kBlocks, kBlock)(tree_sum<true>, x.p, with.p);
    Launcher("tree_sum<false>", kBlocks, kBlock)(tree_sum<false>, x.p, without.p);
    Launcher("read_right_then_overwrite<true>", kBlocks,
             kBlock)(read_right_then_overwrite<true>, x.p, right.p);
    Launcher("read_right_then_overwrite<false>", kBlocks,
             kBlock)(read_right_then_overwrite<false>, x.p, raced.p);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(with.host(), want_sums);
    EXPECT_EQ(right.host(), want_right);
    EXPECT_EQ(without.host() == want_sums, !forward);
    EXPECT_EQ(raced.host() == want_right, forward);
  }
}

// This file is translated as the kernels of src/backends/cuda/ are, so the
// fill comes from translate_launches.py's call after each declaration.
TEST(DeviceEmulator, SharedMemoryThatABlockDidNotWriteReadsAsNaN) {
  for (const auto order : {dptrain_emu::Order::kForward, dptrain_emu::Order::kReverse}) {
    const InOrder in(order);
    DeviceArray<float> out(2 * kBlock), kept(2 * kBlock);
    Launcher("read_shared_written_by_block_0", 2, kBlock)(read_shared_written_by_block_0, out.p,
                                                          kept.p);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (int t = 0; t < kBlock; ++t) {
      EXPECT_EQ(out.p[t], static_cast<float>(t));
      EXPECT_TRUE(std::isnan(out.p[kBlock + t])) << "thread " << t << " of block 1";
      EXPECT_EQ(kept.p[t], static_cast<float>(t));
      EXPECT_EQ(kept.p[kBlock + t], static_cast<float>(1 + t));
    }
  }
}

// Dynamic shared memory is the block's, of the launch's size, NaN where the
// block did not write it; over 48 KiB a launch needs the kernel's opt-in,
// and the opt-in itself stops at 227 KiB, as on an H100.
TEST(DeviceEmulator, DynamicSharedMemoryIsTheBlocksAndOver48KiBNeedsTheOptIn) {
  const auto launch = [](int n, float* out, unsigned* misalignment) {
    Launcher("dynamic_shared_rows", 2, kBlock, n * sizeof(float))(dynamic_shared_rows, out,
                                                                  misalignment, n);
  };
  const auto expect_block_0s = [](const DeviceArray<float>& out, int n) {
    for (int i = 0; i < n; i += 97) {
      EXPECT_EQ(out.p[i], static_cast<float>(i));
      EXPECT_TRUE(std::isnan(out.p[n + i])) << "element " << i << " of block 1";
    }
  };
  constexpr int kSmall = 1000, kLarge = 15 * 1024;  // 4,000 bytes; 60 KiB
  DeviceArray<float> small(2 * kSmall), large(2 * kLarge);
  DeviceArray<unsigned> misalignment(2);
  launch(kSmall, small.p, misalignment.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  expect_block_0s(small, kSmall);
  EXPECT_EQ(misalignment.p[0], 0u);
  EXPECT_EQ(misalignment.p[1], 0u);

  launch(kLarge, large.p, misalignment.p);
  std::string e = take_detail();
  EXPECT_NE(e.find("cudaErrorInvalidValue: dynamic_shared_rows: 61440 bytes of dynamic shared "
                   "memory, over the kernel's 49152 (more needs "
                   "cudaFuncAttributeMaxDynamicSharedMemorySize)"),
            std::string::npos)
      << e;
  EXPECT_TRUE(std::isnan(large.p[0])) << "a refused launch ran";
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_shared_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);
  int most = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(most, 227 * 1024);
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_shared_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kLarge * sizeof(float)),
            cudaSuccess);
  launch(kLarge, large.p, misalignment.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  expect_block_0s(large, kLarge);
  launch(kLarge + 1, large.p, misalignment.p);  // over the kernel's attribute
  e = take_detail();
  EXPECT_NE(e.find("over the kernel's 61440 (its cudaFuncAttributeMaxDynamicSharedMemorySize)"),
            std::string::npos)
      << e;
}

TEST(DeviceEmulator, ShufflesExchangeTheLanesValues) {
  DeviceArray<double> x(32), sums(32);
  double total = 0.0;
  for (int i = 0; i < 32; ++i) total += x.p[i] = 0.5 * i - 3.0;
  Launcher("butterfly_sum", 1, 32)(butterfly_sum, x.p, sums.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (double s : sums.host()) EXPECT_EQ(s, total);

  DeviceArray<int> in(64), out(64);
  for (int i = 0; i < 64; ++i) in.p[i] = 1000 + i;
  Launcher("shift_down", 1, 64)(shift_down, in.p, out.p, 5);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int i = 0; i < 64; ++i)  // lanes past the warp's end keep their own value
    EXPECT_EQ(out.p[i], (i % 32) + 5 < 32 ? 1000 + i + 5 : 1000 + i) << "thread " << i;
}

TEST(DeviceEmulator, ThreadsThatExitDoNotHoldABarrierBack) {
  DeviceArray<int> x(kBlock), out(kBlock);
  for (int i = 0; i < kBlock; ++i) x.p[i] = i;
  Launcher("early_exit_then_barrier", 1, kBlock)(early_exit_then_barrier, x.p, out.p, 100);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(out.p[i], 99 - i);
}

TEST(DeviceEmulator, DivergentShuffleAndBarrierAreLaunchErrors) {
  DeviceArray<int> out(kBlock);
  Launcher("divergent_shuffle", 1, 32)(divergent_shuffle, out.p);
  std::string e = take_detail();
  EXPECT_NE(e.find("cudaErrorLaunchFailure"), std::string::npos) << e;
  EXPECT_NE(e.find("divergent_shuffle"), std::string::npos) << e;
  EXPECT_NE(e.find("has ended"), std::string::npos) << e;

  Launcher("divergent_barrier", 1, kBlock)(divergent_barrier, out.p);
  e = take_detail();
  EXPECT_NE(e.find("divergent code"), std::string::npos) << e;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error is reported once";
}

TEST(DeviceEmulator, SyncwarpOrdersAWarpsSharedMemoryAndMustBeReachedByAll) {
  DeviceArray<int> x(kBlock), out(kBlock);
  for (int i = 0; i < kBlock; ++i) x.p[i] = 1000 + i;
  Launcher("reverse_in_warp", 1, kBlock)(reverse_in_warp, x.p, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int i = 0; i < kBlock; ++i) EXPECT_EQ(out.p[i], 1000 + i / 32 * 32 + 31 - i % 32) << i;
  Launcher("divergent_syncwarp", 1, 32)(divergent_syncwarp, out.p);
  const std::string e = take_detail();
  EXPECT_NE(e.find("divergent_syncwarp"), std::string::npos) << e;
  EXPECT_NE(e.find("has ended"), std::string::npos) << e;
}

TEST(DeviceEmulator, BadConfigurationsAndHostPointersRunNothing) {
  DeviceArray<float> x(1024);
  const std::size_t before = dptrain_emu::launches();
  Launcher("touch", 1, 2048)(touch, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launcher("touch", 0, 32)(touch, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launcher("touch", dim3(1, 70000), 32)(touch, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  std::vector<float> host(32);
  Launcher("touch", 1, 32)(touch, host.data());
  const std::string e = take_detail();
  EXPECT_NE(e.find("argument 0 is a pointer to host memory"), std::string::npos) << e;
  EXPECT_EQ(dptrain_emu::launches(), before);
  EXPECT_TRUE(std::isnan(x.p[0])) << "device memory starts as NaN and nothing ran";
  // More threads a block than the kernel's __launch_bounds__: refused, as a
  // GPU refuses it (the check comes from translate_launches.py).
  Launcher("touch_bounded", 1, 128)(touch_bounded, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  EXPECT_TRUE(std::isnan(x.p[0])) << "a refused launch ran";
  Launcher("touch_bounded", 1, 64)(touch_bounded, x.p + 256);  // within them
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(x.p[256 + 63], 1.0f);
  Launcher("touch", 1, 32)(touch, x.p + 992);  // inside the allocation
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(x.p[1023], 1.0f);
}

// The runtime counters (RuntimeCall) see each allocating or waiting call
// once, and nothing else: queued work, a copy to pinned memory and an event
// record do not wait.
TEST(DeviceEmulator, RuntimeCountersCountAllocationsAndWaits) {
  using dptrain_emu::RuntimeCall;
  auto counts = [] {
    std::vector<std::size_t> c;
    for (int i = 0; i < static_cast<int>(RuntimeCall::kCount); ++i)
      c.push_back(dptrain_emu::calls(static_cast<RuntimeCall>(i)));
    return c;
  };
  auto added = [&](const std::vector<std::size_t>& before, RuntimeCall c) {
    return counts()[static_cast<std::size_t>(c)] - before[static_cast<std::size_t>(c)];
  };
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  const auto start = counts();
  DeviceArray<float> x(32);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 32 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(added(start, RuntimeCall::kMalloc), 1u);
  EXPECT_EQ(added(start, RuntimeCall::kHostAlloc), 1u);

  const auto queued = counts();
  Launcher("touch", 1, 32, 0, s)(touch, x.p);
  cudaMemcpyAsync(pinned, x.p, 32 * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaEventRecord(e, s);
  EXPECT_EQ(counts(), queued) << "queuing work waits for nothing";
  cudaEventSynchronize(e);
  EXPECT_EQ(static_cast<float*>(pinned)[31], 1.0f);
  std::vector<float> pageable(32);
  cudaMemcpyAsync(pageable.data(), x.p, 32 * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  cudaDeviceSynchronize();
  EXPECT_EQ(added(queued, RuntimeCall::kEventSync), 1u);
  EXPECT_EQ(added(queued, RuntimeCall::kBlockingCopy), 1u);
  EXPECT_EQ(added(queued, RuntimeCall::kStreamSync), 1u);
  EXPECT_EQ(added(queued, RuntimeCall::kDeviceSync), 1u);
  cudaFreeHost(pinned);
  EXPECT_EQ(added(queued, RuntimeCall::kFree), 1u);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

}  // namespace
