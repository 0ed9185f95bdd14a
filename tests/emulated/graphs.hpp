// Implements: stream capture and graphs for the host emulation of CUDA (the
// runtime calls themselves are include/cuda_runtime.h's). Between
// cudaStreamBeginCapture and cudaStreamEndCapture, work given to the stream
// through enqueue (kernel launches, device-to-device and pinned copies,
// memsets, the cuBLAS, cuBLASLt and cuDNN stand-ins) is recorded, not
// queued: nothing of it runs. The graph holds the recorded work in order;
// cudaGraphInstantiate copies it, and each cudaGraphLaunch queues the copy
// on a stream as ordinary work (streams.hpp's schedules apply), so every
// replay runs the same closures again, on the arguments as they were when
// the work was captured, as a real graph's kernel nodes hold theirs. A
// kernel launch counts in launches() each time it runs, never when it is
// recorded.
//
// A call that CUDA forbids during a capture invalidates it here: the call
// does nothing and returns cudaErrorStreamCaptureUnsupported (also the last
// error, with a detail naming it); work given to the stream afterwards is
// dropped (cudaErrorStreamCaptureInvalidated as the last error); and
// cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated and a null
// graph. Those calls: cudaStreamSynchronize or cudaStreamQuery of the
// capturing stream; cudaDeviceSynchronize while any stream captures; a
// cudaMemcpyAsync on it from pageable host memory (staged) or into it; the
// NCCL stand-in's collectives on it (enqueue_and_run, enqueue_late);
// cudaEventSynchronize of an event recorded in the capture; and the
// potentially unsafe calls cudaMalloc, cudaFree, cudaMallocHost,
// cudaHostAlloc and cudaFreeHost as the capture modes say: made by the
// thread that began a capture other than a Relaxed one, or by any thread
// during a Global one (those captures are invalidated; a ThreadLocal
// capture lets other threads allocate).
//
// Simplifications, each stricter than CUDA, never looser:
// - A Relaxed capture lets its thread call the five allocation calls, but
//   is otherwise taken as the others are.
// - Events do not enter captures: cudaEventRecord on the capturing stream
//   and cudaStreamWaitEvent by it invalidate the capture, where CUDA records
//   event nodes and forks other streams into the capture. So a graph holds
//   one stream's work, in order.
// - Errors CUDA has of its own for a misused capture (cudaErrorIllegalState,
//   cudaErrorStreamCaptureWrongThread, cudaErrorStreamCaptureIsolation, ...)
//   are cudaErrorInvalidValue or cudaErrorStreamCaptureUnsupported here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "device_emulator.hpp"

typedef struct CUgraphEmulated* cudaGraph_t;
typedef struct CUgraphExecEmulated* cudaGraphExec_t;
typedef enum {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;
typedef enum {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

namespace dptrain_emu {

// cudaStreamBeginCapture: cudaErrorStreamCaptureUnsupported on the legacy
// stream, cudaErrorInvalidValue on a stream already capturing or for an
// unknown mode.
cudaError_t begin_capture(cudaStream_t s, cudaStreamCaptureMode mode);
// None, Active, or Invalidated (capturing until cudaStreamEndCapture).
cudaStreamCaptureStatus capture_status(cudaStream_t s);
// cudaStreamEndCapture: the graph of the recorded work, or a null graph and
// cudaErrorStreamCaptureInvalidated; cudaErrorInvalidValue when s does not
// capture (CUDA: cudaErrorIllegalState) or graph is null.
cudaError_t end_capture(cudaStream_t s, cudaGraph_t* graph);
// A copy of the graph's work (null for a null graph).
cudaGraphExec_t instantiate_graph(cudaGraph_t graph);
// Queues exec's work, in order, on s, and counts it in graph_launches().
void launch_graph(cudaGraphExec_t exec, cudaStream_t s);
void destroy_graph(cudaGraph_t graph);
void destroy_graph_exec(cudaGraphExec_t exec);

// The calls CUDA forbids during a capture ask these first: true when the
// call was made during one, which it has invalidated (recording the last
// error, naming call); the call then returns
// cudaErrorStreamCaptureUnsupported and does nothing. The first for a call
// on s (false when s does not capture); the second for a call forbidden
// while any stream captures; the third for a potentially unsafe call (an
// allocation) of this thread, by the captures' modes.
bool invalidate_capture_of(cudaStream_t s, const char* call);
bool invalidate_every_capture(const char* call);
bool invalidate_captures_forbidding(const char* call);

// --- between streams.cpp and graphs.cpp -------------------------------------
// streams.cpp's lock, which covers the captures too.
std::recursive_mutex& streams_lock();
// Whether s captures: then work is recorded in its capture (or dropped, if
// the capture was invalidated) and must not be queued.
bool recorded_in_capture(cudaStream_t s, const StreamWork& work);
// The capture s is in, as a number no other capture has; 0 for none.
std::uint64_t capture_of(cudaStream_t s);
// As invalidate_capture_of, for the capture numbered capture (0: none),
// whichever stream it is on; false once it has ended.
bool invalidate_capture(std::uint64_t capture, const char* call);
// Ends s's capture, if any, without a graph (s is being destroyed).
void forget_capture(cudaStream_t s);

}  // namespace dptrain_emu
