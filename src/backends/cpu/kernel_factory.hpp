// Implements: the factory of the CPU backend's kernel tables (internal
// header): one function template for every family, specialized in the file
// of the family's name (dense_kernels.cpp defines
// make_cpu_kernels<DenseKernels>), so that a new family adds no declaration
// here; CpuBackend declares that specialization and registers the family
// (add_family), a line each.
#pragma once

#include <memory>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// The CPU table of Family, e.g. in norm_kernels.cpp:
//   template <>
//   std::unique_ptr<NormKernels> make_cpu_kernels<NormKernels>() { ... }
template <typename Family>
std::unique_ptr<Family> make_cpu_kernels();

}  // namespace dptrain
