// Implements: the factories of the cuDNN plans (internal to src/backends/cuda/cudnn/),
// each in its own file: conv_plan.cpp, pool_plan.cpp. A plan keeps a
// reference to the context, which must outlive it (the backend's spatial
// kernel table owns the context; layers drop their plans before it goes).
#pragma once

#include <memory>

#include "backends/cuda/cudnn/cudnn_context.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain::cuda {

std::unique_ptr<ConvPlan> make_cudnn_conv_plan(CudnnContext& context, const ConvGeometry& g);
std::unique_ptr<PoolPlan> make_cudnn_pool_plan(CudnnContext& context, const PoolGeometry& g);

}  // namespace dptrain::cuda
