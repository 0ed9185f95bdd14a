// Implements: the CPU spatial kernel family — convolution and pooling
// plans on oneDNN primitives (src/backends/cpu/onednn/conv_plan.cpp, pool_plan.cpp).
#include <memory>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/onednn/spatial_plans.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain {
namespace {

class CpuSpatialKernels final : public SpatialKernels {
 public:
  std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry& g) override {
    return onednn::make_conv_plan(g);
  }
  std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) override {
    return onednn::make_pool_plan(g);
  }
};

}  // namespace

template <>
std::unique_ptr<SpatialKernels> make_cpu_kernels<SpatialKernels>() {
  return std::make_unique<CpuSpatialKernels>();
}

}  // namespace dptrain
