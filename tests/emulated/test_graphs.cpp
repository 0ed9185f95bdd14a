// Implements: tests of stream capture and graphs in the CUDA host emulation
// (graphs.hpp), so that a backend that captures its work and replays it can
// be tested on it: captured work does not run until the graph is launched;
// each launch runs it again, in order, on the arguments as captured, and
// counts (graph_launches, launches); a call CUDA forbids during a capture
// (a synchronization, an allocation as the capture's mode says, a pageable
// copy, an event, the NCCL stand-in's collectives) invalidates it, and what
// was recorded never runs;
// cudaStreamIsCapturing tells None, Active and Invalidated apart; the legacy
// stream cannot capture. The tests hold under either schedule of the
// streams (streams.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cublasLt.h"
#include "cuda_runtime.h"

namespace {

__global__ void mul_add(float* x, float factor, float addend, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = x[i] * factor + addend;
}

constexpr int kN = 64;

struct Graphs : ::testing::Test {
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&x, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&y, kN * sizeof(float)), cudaSuccess);  // all-ones bytes: NaN
    ASSERT_EQ(cudaMemsetAsync(x, 0, kN * sizeof(float), a), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  }
  void TearDown() override {
    for (cudaStream_t s : {a, b}) {  // a test that failed while capturing
      cudaGraph_t left = nullptr;
      if (cudaStreamEndCapture(s, &left) == cudaSuccess) cudaGraphDestroy(left);
    }
    cudaGetLastError();
    cudaFree(x);
    cudaFree(y);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
  void launch(cudaStream_t s, float factor, float addend, float* to = nullptr) {
    dptrain_emu::Launcher("mul_add", 1, kN, 0, s)(mul_add, to ? to : x, factor, addend, kN);
  }
  cudaStreamCaptureStatus status(cudaStream_t s) {
    auto st = static_cast<cudaStreamCaptureStatus>(-1);
    EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    return st;
  }
  // Ends a's capture, which `call` must have invalidated: no graph, and
  // nothing recorded ever runs.
  void expect_invalidated(const std::string& call) {
    SCOPED_TRACE(call);
    EXPECT_EQ(status(a), cudaStreamCaptureStatusInvalidated);
    auto graph = reinterpret_cast<cudaGraph_t>(this);  // anything but null
    EXPECT_EQ(cudaStreamEndCapture(a, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    EXPECT_EQ(status(a), cudaStreamCaptureStatusNone);
    cudaGetLastError();  // what the refused call recorded (tests check it where they care)
    EXPECT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT_EQ(x[0], 0.0f);
  }
  // The graph of what `record` gives a, instantiated.
  cudaGraphExec_t capture(const std::function<void()>& record) {
    EXPECT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
    record();
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
    EXPECT_NE(graph, nullptr);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the exec keeps its copy
    return exec;
  }

  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t e = nullptr;
  float* x = nullptr;
  float* y = nullptr;
};

TEST_F(Graphs, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  const std::size_t ran = dptrain_emu::launches();
  const std::size_t ran_here = dptrain_emu::launches_by_kernel()["mul_add"];
  cudaGraphExec_t exec = capture([this] {
    launch(a, 1.0f, 1.0f);
    ASSERT_EQ(cudaMemsetAsync(y, 0, kN * sizeof(float), a), cudaSuccess);
  });
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(dptrain_emu::launches(), ran);  // recorded, not run: not counted
  ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[kN - 1], 1.0f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(dptrain_emu::launches(), ran + 1);
  EXPECT_EQ(dptrain_emu::launches_by_kernel()["mul_add"], ran_here + 1);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST_F(Graphs, EachLaunchRunsTheWorkAgainInOrderOnTheCapturedArguments) {
  float factor = 2.0f;
  cudaGraphExec_t exec = capture([&] {
    launch(a, factor, 0.0f);  // x = 2x
    factor = 100.0f;          // after the launch: not what the graph runs
    launch(a, 1.0f, 1.0f);    // x = x + 1
  });
  const std::size_t graphs = dptrain_emu::graph_launches(), ran = dptrain_emu::launches();
  ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
  // Queued as any other work: run by now only under the eager schedule.
  EXPECT_EQ(x[0], dptrain_emu::eager_schedule() ? 3.0f : 0.0f);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 3.0f);  // 0 -> 0 -> 1 -> 2 -> 3; out of order 6, on factor 100 it is 101
  EXPECT_EQ(dptrain_emu::graph_launches(), graphs + 2);
  EXPECT_EQ(dptrain_emu::launches(), ran + 4);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST_F(Graphs, WorkQueuedBeforeTheCaptureIsNotInTheGraph) {
  launch(a, 1.0f, 1.0f);  // queued (lazy) or run (eager), not captured
  cudaGraphExec_t exec = capture([this] { launch(a, 1.0f, 10.0f); });
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 1.0f);
  ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 11.0f);
  cudaGraphExecDestroy(exec);
}

TEST_F(Graphs, PinnedAndDeviceCopiesAreRecordedAndReadWhenTheGraphRuns) {
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float)), cudaSuccess);
  *pinned = 1.0f;
  cudaGraphExec_t exec = capture([&] {
    ASSERT_EQ(cudaMemcpyAsync(x, pinned, sizeof(float), cudaMemcpyHostToDevice, a), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(x + 1, x, sizeof(float), cudaMemcpyDeviceToDevice, a), cudaSuccess);
  });
  EXPECT_EQ(status(a), cudaStreamCaptureStatusNone);
  for (float v : {7.0f, 9.0f}) {
    *pinned = v;
    ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT_EQ(x[0], v);
    EXPECT_EQ(x[1], v);
  }
  cudaGraphExecDestroy(exec);
  cudaFreeHost(pinned);
}

TEST_F(Graphs, ASynchronizeDuringCaptureInvalidatesItAndDiscardsTheWork) {
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch(a, 1.0f, 1.0f);
  EXPECT_EQ(cudaStreamSynchronize(a), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(x[0], 0.0f);  // the synchronize ran nothing
  launch(a, 1.0f, 1.0f);  // into an invalidated capture: dropped
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
  expect_invalidated("cudaStreamSynchronize");
  launch(a, 1.0f, 1.0f);  // the stream is an ordinary one again
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 1.0f);
}

TEST_F(Graphs, AnAllocationDuringAnyCaptureInvalidatesEveryCapture) {
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(b, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  launch(a, 1.0f, 1.0f);
  launch(b, 1.0f, 1.0f);
  float* p = x;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(status(b), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(b, &graph), cudaErrorStreamCaptureInvalidated);
  expect_invalidated("cudaMalloc");
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);  // allowed again
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// cudaMalloc and cudaFree by mode: any thread's end a Global capture, the
// capturing thread's a ThreadLocal one, nobody's a Relaxed one.
TEST_F(Graphs, AllocationsInvalidateACaptureAsItsModeSays) {
  const auto allocate_on_another_thread = [] {
    cudaError_t rc = cudaSuccess;
    std::thread([&rc] {
      void* p = nullptr;
      rc = cudaMalloc(&p, 16);
      if (rc == cudaSuccess) rc = cudaFree(p);
    }).join();
    return rc;
  };
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(allocate_on_another_thread(), cudaSuccess);
  EXPECT_EQ(status(a), cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  cudaGraphDestroy(graph);

  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(status(a), cudaStreamCaptureStatusActive);
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  cudaGraphDestroy(graph);

  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch(a, 1.0f, 1.0f);
  EXPECT_EQ(allocate_on_another_thread(), cudaErrorStreamCaptureUnsupported);
  expect_invalidated("cudaMalloc on another thread");
}

TEST_F(Graphs, CopiesFromOrIntoPageableMemoryDuringCaptureInvalidateIt) {
  float pageable = 5.0f;
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(x, &pageable, sizeof(float), cudaMemcpyHostToDevice, a),
            cudaErrorStreamCaptureUnsupported);
  expect_invalidated("a copy from pageable memory");
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch(a, 1.0f, 1.0f);
  EXPECT_EQ(cudaMemcpyAsync(&pageable, x, sizeof(float), cudaMemcpyDeviceToHost, a),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(pageable, 5.0f);
  expect_invalidated("a copy into pageable memory");
}

TEST_F(Graphs, OtherCallsForbiddenDuringCaptureInvalidateIt) {
  bool collective_ran = false;
  float* pinned = nullptr;
  const std::vector<std::pair<std::string, std::function<cudaError_t()>>> calls = {
      {"cudaStreamQuery", [this] { return cudaStreamQuery(a); }},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
      {"cudaFree", [this] { return cudaFree(y); }},
      {"cudaMallocHost", [&] { return cudaMallocHost(reinterpret_cast<void**>(&pinned), 4); }},
      {"cudaEventRecord", [this] { return cudaEventRecord(e, a); }},
      {"cudaStreamWaitEvent", [this] { return cudaStreamWaitEvent(a, e, 0); }},
      {"enqueue_and_run",
       [&] {
         dptrain_emu::enqueue_and_run(a, [&] { collective_ran = true; });
         return cudaGetLastError();
       }},
      {"enqueue_late", [&] {
         dptrain_emu::enqueue_late(a, [&] { collective_ran = true; });
         return cudaGetLastError();
       }}};
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
    launch(a, 1.0f, 1.0f);
    EXPECT_EQ(call(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(name);
  }
  EXPECT_FALSE(collective_ran);
  EXPECT_EQ(pinned, nullptr);
  EXPECT_TRUE(dptrain_emu::is_device_range(y, kN * sizeof(float)));  // not freed
}

TEST_F(Graphs, AnEventRecordedInACaptureCannotBeSynchronizedWithUntilItEnds) {
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, a), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamWaitEvent(b, e, 0), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  expect_invalidated("cudaEventRecord");
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);  // the capture is over
}

TEST_F(Graphs, IsCapturingTellsNoneActiveAndInvalidated) {
  EXPECT_EQ(status(a), cudaStreamCaptureStatusNone);
  EXPECT_EQ(status(nullptr), cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(status(a), cudaStreamCaptureStatusActive);
  EXPECT_EQ(status(b), cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaStreamIsCapturing(a, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(status(a), cudaStreamCaptureStatusInvalidated);
  expect_invalidated("cudaDeviceSynchronize");
}

TEST_F(Graphs, OnlyARealStreamNotYetCapturingCanBeginACapture) {
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(status(nullptr), cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaStreamBeginCapture(b, static_cast<cudaStreamCaptureMode>(7)),
            cudaErrorInvalidValue);
  EXPECT_EQ(status(b), cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaErrorInvalidValue);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(b, &graph), cudaErrorInvalidValue);  // b never began
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(nullptr, a), cudaErrorInvalidValue);
}

TEST_F(Graphs, ALaunchErrorDuringCaptureIsTheLaunchsAndRecordsNothing) {
  float host[kN] = {};
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch(a, 1.0f, 1.0f, host);  // a host pointer: refused at the launch, as without a capture
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(status(a), cudaStreamCaptureStatusActive);
  launch(a, 1.0f, 2.0f);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], 2.0f);
  EXPECT_EQ(host[0], 0.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A bf16 result: each run of the matmul has an fp32 buffer of its own.
TEST_F(Graphs, ACapturedCublasLtMatmulReplays) {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;  // 2 x 2 bf16, for A, B and D
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtCreate(&lt);
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 2, 2, 2);
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, layout, layout, layout, layout, pref, 1,
                                           &result, &found),
            CUBLAS_STATUS_SUCCESS);
  auto* m = reinterpret_cast<__nv_bfloat16*>(y);  // A (identity), B, D: 4 values each
  const float values[12] = {1, 0, 0, 1, 1, 2, 3, 4, 0, 0, 0, 0};
  for (int i = 0; i < 12; ++i) m[i] = __float2bfloat16_rn(values[i]);
  const float one = 1.0f, zero = 0.0f;
  cudaGraphExec_t exec = capture([&] {
    ASSERT_EQ(cublasLtMatmul(lt, desc, &one, m, layout, m + 4, layout, &zero, m + 8, layout,
                             m + 8, layout, &result.algo, nullptr, 0, a),
              CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_EQ(__bfloat162float(m[11]), 0.0f);
  for (float scale : {1.0f, 2.0f}) {
    for (int i = 0; i < 4; ++i) m[4 + i] = __float2bfloat16_rn(scale * values[4 + i]);
    ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(__bfloat162float(m[8 + i]), scale * values[4 + i]);
  }
  cudaGraphExecDestroy(exec);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
}

}  // namespace
