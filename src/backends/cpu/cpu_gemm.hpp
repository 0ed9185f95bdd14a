// Implements: the CPU backend's GEMM library, chosen at build time
// (DPTRAIN_CPU_GEMM): oneDNN, which dispatches on the CPU's instructions
// (AVX2, AVX-512, AMX) whatever the CPU model, or OpenBLAS, for CPUs where
// Debian's oneDNN has no fast path (aarch64). Exactly one of
// src/backends/cpu/gemm_<library>/ is compiled.
#pragma once

#include <string>

namespace dptrain::cpu_gemm {

// First thing in main(), before MPI starts. OpenBLAS may re-execute the
// program with the kernel this CPU supports (gemm_openblas/blas_kernel.hpp);
// oneDNN has nothing to do.
void prepare(char** argv);

// The library's own thread pool, where it has one apart from OpenMP
// (OpenBLAS's); the OpenMP team is sized by the backend.
void set_threads(int threads);

// Row-major C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C with m, n,
// k >= 1; lda/ldb/ldc are the row strides of the stored matrices.
// Deterministic for a fixed shape and thread count.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// For the start-up summary: library, version, and the kernel or instruction
// set it runs, e.g. "oneDNN 2.6.3, AVX2 kernels".
std::string describe();

}  // namespace dptrain::cpu_gemm
