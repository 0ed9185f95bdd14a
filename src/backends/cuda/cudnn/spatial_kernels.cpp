// Implements: the CUDA backend's spatial kernel family on cuDNN — the
// table that hands out convolution and pooling plans (conv_plan.cpp,
// pool_plan.cpp) over one shared context: the backend's cuDNN handle on its
// compute stream, its precision, and the workspace and bf16 buffers.
#include <memory>

#include "backends/cuda/cudnn/cudnn_plans.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain::cuda {
namespace {

class CudnnSpatialKernels final : public SpatialKernels {
 public:
  CudnnSpatialKernels(const Launch& l, Precision p) : context_(l, p) {}

  // The handle first: a broken cuDNN install is reported as such, before
  // any descriptor call fails for the same reason.
  std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry& g) override {
    context_.handle();
    return make_cudnn_conv_plan(context_, g);
  }
  std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) override {
    context_.handle();
    return make_cudnn_pool_plan(context_, g);
  }

 private:
  CudnnContext context_;
};

}  // namespace

template <>
std::unique_ptr<SpatialKernels> make_kernels<SpatialKernels>(const Launch& l, Precision p) {
  return std::make_unique<CudnnSpatialKernels>(l, p);
}

std::string spatial_library() { return cudnn_version(); }

}  // namespace dptrain::cuda
