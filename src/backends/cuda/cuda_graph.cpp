// Implements: stream capture into CUDA graphs (see cuda_graph.hpp). The
// capture is thread-local: only calls of this thread that are unsafe
// during a capture (cudaMalloc, a synchronization) invalidate it, while
// other threads (the input reader) go on as usual.
#include "backends/cuda/cuda_graph.hpp"

#include <exception>
#include <utility>

#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {
namespace {

class CudaGraph final : public Backend::RecordedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override { DPT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

std::string failed(const char* what, cudaError_t rc) {
  return std::string(what) + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
}

}  // namespace

std::unique_ptr<Backend::RecordedWork> record_graph(cudaStream_t stream,
                                                    const std::function<void()>& work,
                                                    std::string* why) {
  std::string failure;
  const cudaError_t began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (began != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = failed("cudaStreamBeginCapture", began);
    return nullptr;
  }
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Always ended, so the stream leaves capture mode whatever happened.
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (failure.empty() && ended != cudaSuccess) failure = failed("cudaStreamEndCapture", ended);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) failure = failed("cudaGraphInstantiate", made);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!failure.empty()) {
    cudaGetLastError();  // what the refused calls recorded; not sticky
    if (exec) cudaGraphExecDestroy(exec);
    if (why) *why = failure;
    return nullptr;
  }
  return std::make_unique<CudaGraph>(exec, stream);
}

}  // namespace dptrain::cuda
