// Implements: the CUDA backend's recorded work (Backend::record): stream
// capture into a CUDA graph, instantiated once and launched on the stream
// at each replay (internal to src/backends/cuda/).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "dptrain/backends/backend.hpp"

namespace dptrain::cuda {

// Captures what `work` queues on `stream` (nothing runs) and instantiates
// it; null with the reason in *why when a call inside `work` is not
// capturable (it waits or allocates: the capture is invalidated), throws, or
// the graph cannot be instantiated. Any error the failed capture left is
// cleared: CUDA's capture errors are not sticky, and the caller runs the
// work as usual instead.
std::unique_ptr<Backend::RecordedWork> record_graph(cudaStream_t stream,
                                                    const std::function<void()>& work,
                                                    std::string* why);

}  // namespace dptrain::cuda
