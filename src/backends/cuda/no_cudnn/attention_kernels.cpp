// Implements: the choice of the CUDA backend's attention table in a build
// made without cuDNN: `--attention cudnn` is a usage error (exit 2) saying
// so; `auto` and `fused` make the fused kernels, `math` none.
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cuda {

std::unique_ptr<FusedAttentionKernels> make_fused_attention(const Launch& l, Precision p,
                                                            bool requested);

std::unique_ptr<FusedAttentionKernels> make_attention_kernels(const Launch& l, Precision p,
                                                              AttentionImpl impl, Backend&) {
  if (impl == AttentionImpl::kCudnn)
    throw Error(ExitCode::kUsage,
                "--attention cudnn: this build has no cuDNN (rebuild with cuDNN where CMake "
                "finds it); use --attention fused or auto");
  if (impl == AttentionImpl::kMath) return nullptr;
  return make_fused_attention(l, p, impl == AttentionImpl::kFused);
}

}  // namespace dptrain::cuda
