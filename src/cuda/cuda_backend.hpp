// Implements: the factory of the CUDA backend (internal header; plain C++,
// no CUDA types, so callers need no CUDA headers).
#pragma once

#include <memory>

#include "dptrain/backend.hpp"

namespace dptrain {
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts);
int cuda_visible_devices();  // 0 when no GPU is usable
}
