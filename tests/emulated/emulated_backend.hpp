// Implements: the factory of the emulated CUDA backend (emulated_backend.cpp),
// which the emulated build of the GPU tests gets from gpu_test::make_gpu.
#pragma once

#include <memory>

#include "dptrain/backend.hpp"

namespace emulated {

std::unique_ptr<dptrain::Backend> make_emulated_cuda_backend(const dptrain::BackendOptions& o);

}  // namespace emulated
