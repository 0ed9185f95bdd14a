// Implements: the choice of OpenBLAS's GEMM kernel for this CPU, made before
// anything runs (see blas_kernel.cpp for why this needs a re-exec).
#pragma once

#include <string>

namespace dptrain {

// The instruction-set level of a GEMM kernel or a CPU, weakest first.
enum class SimdLevel { kSse = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3, kAvx512Bf16 = 4 };

// The best level this CPU (and its OS, for the AVX/AVX-512 register state)
// supports.
SimdLevel cpu_simd_level();

// The level OpenBLAS kernel `core` (as openblas_get_corename() names it) is
// written for; unknown names count as SSE, the generic fall-back.
SimdLevel kernel_simd_level(const std::string& core);

// The OpenBLAS core type to ask for on a CPU of `level` ("" below AVX2, where
// OpenBLAS's own pick is kept).
const char* kernel_for_level(SimdLevel level);

// Call first thing in main(), before MPI starts. When the OpenBLAS that was
// loaded runs a kernel below what the CPU supports (its model table does not
// know the CPU), re-executes this program with OPENBLAS_CORETYPE set to the
// right kernel; returns otherwise. A user's own OPENBLAS_CORETYPE is obeyed.
void select_blas_kernel(char** argv);

// One line for the start-up summary: library, version, the kernel in use and
// how it was chosen, e.g. "OpenBLAS 0.3.21, Haswell kernel (its own pick,
// Prescott, is below this CPU's AVX2)".
std::string blas_description();

}  // namespace dptrain
