// Implements: the factory of the CUDA backend's kernel tables (internal
// header): one function template for every family, specialized in the file
// of the family's name over the launchers of kernels.hpp (dense_kernels.cpp
// defines make_kernels<DenseKernels>), so that a new family adds no
// declaration here; CudaBackend declares that specialization and registers
// the family (add_family), a line each. A table launches on l.stream, the
// backend's compute stream, which must outlive it.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernel_family.hpp"

namespace dptrain::cuda {

// The CUDA table of Family, launching with l, in the backend's precision p
// where the family has a precision of its own (convolutions), e.g.
//   template <>
//   std::unique_ptr<NormKernels> make_kernels<NormKernels>(const Launch& l, Precision) { ... }
template <typename Family>
std::unique_ptr<Family> make_kernels(const Launch& l, Precision p);

// The library behind the spatial family (cudnn/spatial_kernels.cpp, or
// no_cudnn/ in a build without cuDNN), for the start-up summary: "cuDNN
// 9.19.0" or "no cuDNN".
std::string spatial_library();

}  // namespace dptrain::cuda
