// Implements: the CUDA backend's spatial kernel family in a build made
// without cuDNN: every plan request is a usage error. Layers ask for their
// plan at Layer::allocate, when the model is built, so a CNN on --device
// cuda stops with this message (exit 2) before any data is read.
#include <memory>
#include <string>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cuda {
namespace {

[[noreturn]] void needs_cudnn(const char* layers) {
  throw Error(ExitCode::kUsage,
              std::string(layers) +
                  " layers on --device cuda need cuDNN, which this build was made without; "
                  "rebuild with cuDNN (its cudnn.h and libcudnn where CMake finds them, e.g. "
                  "beside the CUDA Toolkit) or use --device cpu");
}

class NoSpatialKernels final : public SpatialKernels {
 public:
  std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry&) override { needs_cudnn("conv"); }
  std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) override {
    needs_cudnn(g.kind == PoolKind::kMax ? "maxpool" : "avgpool and gap");
  }
};

}  // namespace

template <>
std::unique_ptr<SpatialKernels> make_kernels<SpatialKernels>(const Launch&, Precision) {
  return std::make_unique<NoSpatialKernels>();
}

std::string spatial_library() { return "no cuDNN"; }

}  // namespace dptrain::cuda
