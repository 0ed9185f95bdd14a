// Implements: the factory of the CUDA backend (internal header; plain C++,
// no CUDA types, so callers need no CUDA headers). src/backends/none/cuda_none.cpp
// implements it in a build without CUDA.
#pragma once

#include <memory>
#include <string>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/backend_factory.hpp"

namespace dptrain {
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts);
int cuda_visible_devices();  // 0 when no GPU is usable
// cudaGetDeviceCount, or 0 and the reason in *why (when why is not null).
// Clears the error, which is not sticky, so later runtime calls in the
// process are unaffected (cuda_devices.cpp).
int cuda_device_count(std::string* why);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as nvidia-smi prints it, so that
// ranks can tell whether two of them were given the same GPU; empty when the
// device cannot be queried. Never throws.
std::string cuda_device_uuid(int device);
}  // namespace dptrain
