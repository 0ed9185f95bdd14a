// Implements: the stream captures and graphs of graphs.hpp. A capture is
// the work recorded so far on one stream, kept by stream under streams.cpp's
// lock (streams_lock), which the hooks streams.cpp calls already hold; a
// graph and its instantiation are each a list of that work, in order.
#include "graphs.hpp"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

struct CUgraphEmulated {
  std::vector<dptrain_emu::StreamWork> work;
};
struct CUgraphExecEmulated {
  std::vector<dptrain_emu::StreamWork> work;
};

namespace dptrain_emu {
namespace {

struct Capture {
  std::uint64_t number = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // that began it
  bool invalidated = false;
  std::vector<StreamWork> work;
};

std::map<cudaStream_t, Capture> g_captures;  // under streams_lock()
std::uint64_t g_captures_begun = 0;
std::atomic<std::size_t> g_graph_launches{0};

void invalidate(Capture& c, const char* call) {
  c.invalidated = true;
  c.work.clear();  // what was recorded never runs
  set_error(cudaErrorStreamCaptureUnsupported,
            std::string(call) + " during a stream capture, which it invalidates");
}

}  // namespace

cudaError_t begin_capture(cudaStream_t s, cudaStreamCaptureMode mode) {
  if (!s) return cudaErrorStreamCaptureUnsupported;  // the legacy stream
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  const std::lock_guard lock(streams_lock());
  const auto [at, begun] = g_captures.try_emplace(s);
  if (!begun) return cudaErrorInvalidValue;
  at->second.number = ++g_captures_begun;
  at->second.mode = mode;
  at->second.thread = std::this_thread::get_id();
  return cudaSuccess;
}

cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  const std::lock_guard lock(streams_lock());
  const auto at = g_captures.find(s);
  if (at == g_captures.end()) return cudaStreamCaptureStatusNone;
  return at->second.invalidated ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
}

cudaError_t end_capture(cudaStream_t s, cudaGraph_t* graph) {
  if (!graph) return cudaErrorInvalidValue;
  const std::lock_guard lock(streams_lock());
  const auto at = g_captures.find(s);
  if (at == g_captures.end()) return cudaErrorInvalidValue;
  Capture capture = std::move(at->second);
  g_captures.erase(at);
  *graph = nullptr;
  if (capture.invalidated) return cudaErrorStreamCaptureInvalidated;
  *graph = new CUgraphEmulated{std::move(capture.work)};
  return cudaSuccess;
}

cudaGraphExec_t instantiate_graph(cudaGraph_t graph) {
  if (!graph) return nullptr;
  const std::lock_guard lock(streams_lock());
  return new CUgraphExecEmulated{graph->work};
}

void launch_graph(cudaGraphExec_t exec, cudaStream_t s) {
  const std::lock_guard lock(streams_lock());
  ++g_graph_launches;
  for (const StreamWork& work : exec->work) enqueue(s, work);
}

void destroy_graph(cudaGraph_t graph) {
  const std::lock_guard lock(streams_lock());
  delete graph;
}

void destroy_graph_exec(cudaGraphExec_t exec) {
  const std::lock_guard lock(streams_lock());
  delete exec;
}

std::size_t graph_launches() { return g_graph_launches.load(); }

bool invalidate_capture_of(cudaStream_t s, const char* call) {
  return invalidate_capture(capture_of(s), call);
}

bool invalidate_every_capture(const char* call) {
  const std::lock_guard lock(streams_lock());
  for (auto& [stream, capture] : g_captures) invalidate(capture, call);
  return !g_captures.empty();
}

bool invalidate_captures_forbidding(const char* call) {
  const std::lock_guard lock(streams_lock());
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  for (auto& [stream, capture] : g_captures) {
    const bool mine = capture.thread == me && capture.mode != cudaStreamCaptureModeRelaxed;
    if (!mine && capture.mode != cudaStreamCaptureModeGlobal) continue;
    invalidate(capture, call);
    forbidden = true;
  }
  return forbidden;
}

bool recorded_in_capture(cudaStream_t s, const StreamWork& work) {
  const std::lock_guard lock(streams_lock());
  const auto at = g_captures.find(s);
  if (at == g_captures.end()) return false;
  if (at->second.invalidated)
    set_error(cudaErrorStreamCaptureInvalidated,
              "work given to a stream whose capture was invalidated: dropped");
  else
    at->second.work.push_back(work);
  return true;
}

std::uint64_t capture_of(cudaStream_t s) {
  const std::lock_guard lock(streams_lock());
  const auto at = g_captures.find(s);
  return at == g_captures.end() ? 0 : at->second.number;
}

bool invalidate_capture(std::uint64_t capture, const char* call) {
  if (capture == 0) return false;
  const std::lock_guard lock(streams_lock());
  for (auto& [stream, c] : g_captures) {
    if (c.number != capture) continue;
    invalidate(c, call);
    return true;
  }
  return false;
}

void forget_capture(cudaStream_t s) {
  const std::lock_guard lock(streams_lock());
  g_captures.erase(s);
}

}  // namespace dptrain_emu
