// Implements: the CUDA factory of a build without CUDA.
#include "backends/cuda/cuda_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

int cuda_visible_devices() { return 0; }
std::string cuda_device_uuid(int) { return {}; }

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  DPT_REQUIRE(false, ExitCode::kUsage,
              "--device cuda: this dptrain was built without CUDA (rebuild with -DDPTRAIN_CUDA=ON)");
  return nullptr;
}

}  // namespace dptrain
