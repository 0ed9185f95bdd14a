// Implements: tests of the deferred streams of the CUDA host emulation
// (streams.hpp), so that the ordering tests run on it (test_upload,
// test_nccl, the training tests) can fail: queued work has not run until
// the host waits for it; a wait on an event runs the recording stream up to
// that record and no further; a copy from pinned memory reads it when it
// runs, one from pageable memory when it is queued; a copy into pageable
// memory has landed when it returns; cuBLAS calls are queued on the
// handle's stream; and a kernel's error is reported by the call that ran it.
// Under the eager schedule (DPTRAIN_EMULATED_STREAMS=eager) work runs when
// queued, unless work queued before it on its stream waits, and late work
// waits until its stream is needed.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"

namespace {

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

// The two halves of the block wait at different barriers.
__global__ void diverging_barrier(float* x) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1.0f;
}

constexpr int kN = 64;

struct Streams : ::testing::Test {
  void SetUp() override {
    eager = dptrain_emu::eager_schedule();
    ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&e, 0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&x, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(x, 0, kN * sizeof(float), a), cudaSuccess);
  }
  void TearDown() override {
    cudaFree(x);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
  // Host reads of device memory straight from the emulated device: what has run.
  float now(int i = 0) const { return x[i]; }
  void launch(cudaStream_t s) { dptrain_emu::Launcher("add_one", 1, kN, 0, s)(add_one, x, kN); }

  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t e = nullptr;
  bool eager = false;
  float* x = nullptr;
};

TEST_F(Streams, QueuedWorkRunsOnlyWhenTheHostWaits) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  cudaStreamSynchronize(a);
  launch(a);
  launch(a);
  EXPECT_EQ(now(), 0.0f);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(now(), 2.0f);
}

TEST_F(Streams, AWaitRunsTheOtherStreamUpToTheRecordOnly) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  cudaStreamSynchronize(a);
  launch(a);
  cudaEventRecord(e, a);
  launch(a);  // after the record: b never waits for it
  cudaStreamWaitEvent(b, e, 0);
  launch(b);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(now(), 2.0f);  // a's first launch and b's, not a's second
  cudaStreamSynchronize(a);
  EXPECT_EQ(now(), 3.0f);
}

TEST_F(Streams, WithoutAWaitStreamsAreUnordered) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  cudaStreamSynchronize(a);
  launch(a);
  launch(b);
  cudaStreamSynchronize(b);
  EXPECT_EQ(now(), 1.0f);  // b ran alone
  cudaEventRecord(e, a);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(now(), 2.0f);
}

TEST_F(Streams, PinnedSourcesAreReadWhenTheCopyRunsPageableOnesWhenQueued) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  float* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float), cudaHostAllocDefault),
            cudaSuccess);
  float pageable = 1.0f;
  *pinned = 1.0f;
  cudaMemcpyAsync(x, pinned, sizeof(float), cudaMemcpyHostToDevice, a);
  cudaMemcpyAsync(x + 1, &pageable, sizeof(float), cudaMemcpyHostToDevice, a);
  *pinned = 5.0f;  // before the copy ran: a race the copy loses
  pageable = 5.0f;  // already staged
  cudaStreamSynchronize(a);
  EXPECT_EQ(now(0), 5.0f);
  EXPECT_EQ(now(1), 1.0f);
  cudaFreeHost(pinned);
}

TEST_F(Streams, CopiesIntoPageableMemoryHaveLandedIntoPinnedNot) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  cudaStreamSynchronize(a);
  launch(a);
  float pageable = -1.0f;
  ASSERT_EQ(cudaMemcpyAsync(&pageable, x, sizeof(float), cudaMemcpyDeviceToHost, a), cudaSuccess);
  EXPECT_EQ(pageable, 1.0f);
  float* pinned = nullptr;
  cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float));
  *pinned = -1.0f;
  launch(a);
  cudaMemcpyAsync(pinned, x, sizeof(float), cudaMemcpyDeviceToHost, a);
  EXPECT_EQ(*pinned, -1.0f);
  cudaStreamSynchronize(a);
  EXPECT_EQ(*pinned, 2.0f);
  cudaFreeHost(pinned);
}

TEST_F(Streams, CublasCallsAreQueuedOnTheHandlesStream) {
  cudaStreamSynchronize(a);
  cublasHandle_t h = nullptr;
  cublasCreate(&h);
  cublasSetStream(h, a);
  float* y = nullptr;
  cudaMalloc(&y, kN * sizeof(float));
  cudaMemsetAsync(y, 0, kN * sizeof(float), a);
  launch(a);  // x = 1
  const float two = 2.0f;
  ASSERT_EQ(cublasSaxpy(h, kN, &two, x, 1, y, 1), CUBLAS_STATUS_SUCCESS);
  std::vector<float> got(kN, -1.0f);
  cudaMemcpyAsync(got.data(), y, kN * sizeof(float), cudaMemcpyDeviceToHost, a);
  EXPECT_EQ(got, std::vector<float>(kN, 2.0f));
  cudaFree(y);
  cublasDestroy(h);
}

TEST_F(Streams, TimedEventsMeasureTheRunNotTheQueueing) {
  if (eager) GTEST_SKIP() << "the lazy schedule's order";
  cudaEvent_t from = nullptr, untimed = nullptr;
  cudaEventCreate(&from);
  cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  cudaEventRecord(from, a);
  cudaEventRecord(e, a);
  float ms = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, from, e), cudaErrorNotReady);
  cudaEventSynchronize(e);
  ASSERT_EQ(cudaEventElapsedTime(&ms, from, e), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  cudaEventRecord(untimed, a);
  cudaEventSynchronize(untimed);
  EXPECT_NE(cudaEventElapsedTime(&ms, from, untimed), cudaSuccess);
  cudaEventDestroy(from);
  cudaEventDestroy(untimed);
}

TEST_F(Streams, EagerWorkRunsAtOnceLateWorkWhenItsStreamIsNeeded) {
  if (!eager) GTEST_SKIP() << "the eager schedule's order";
  launch(a);
  EXPECT_EQ(now(), 1.0f);
  dptrain_emu::enqueue_late(a, [this] { x[0] = 10.0f; });
  launch(a);  // behind the late work: waits for it
  launch(b);
  EXPECT_EQ(now(), 2.0f);
  cudaEventRecord(e, a);
  cudaStreamWaitEvent(b, e, 0);
  launch(b);  // b's wait runs a: the late work, then a's launch, then this
  EXPECT_EQ(now(), 12.0f);
}

TEST_F(Streams, AKernelErrorIsReportedByTheCallThatRanIt) {
  cudaStreamSynchronize(a);
  dptrain_emu::Launcher("diverging_barrier", 1, 64, 0, a)(diverging_barrier, x);
  const cudaError_t at_launch = cudaGetLastError();
  const cudaError_t at_sync = cudaStreamSynchronize(a);
  // The launch was valid: under the lazy schedule the grid has not run yet.
  EXPECT_EQ(eager ? at_launch : at_sync, cudaErrorLaunchFailure);
  EXPECT_EQ(eager ? at_sync : at_launch, cudaSuccess);
  EXPECT_NE(std::strstr(cudaGetErrorString(cudaErrorLaunchFailure), "diverging_barrier"), nullptr);
}

}  // namespace
