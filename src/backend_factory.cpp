// Implements: make_backend, the one run-time choice among the backends CMake
// built (src/none/ supplies the "not built" CUDA factory otherwise).
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "dptrain/build_config.hpp"
#include "dptrain/error.hpp"

namespace dptrain {

bool cuda_compiled() { return DPTRAIN_HAVE_CUDA != 0; }

int cuda_device_count() { return cuda_visible_devices(); }

std::unique_ptr<Backend> make_backend(DeviceKind kind, const BackendOptions& opts) {
  if (kind == DeviceKind::kCpu) return make_cpu_backend(opts);
  return make_cuda_backend(opts);
}

}  // namespace dptrain
