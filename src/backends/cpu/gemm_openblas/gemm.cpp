// Implements: the CPU GEMM on OpenBLAS (see cpu/cpu_gemm.hpp), for CPUs
// where Debian's oneDNN has no fast GEMM (aarch64). Its kernel is picked
// from the CPU's instruction set before anything runs (blas_kernel.hpp).
#include <cblas.h>

#include <algorithm>
#include <string>

#include "backends/cpu/cpu_gemm.hpp"
#include "backends/cpu/gemm_openblas/blas_kernel.hpp"

// Declared here too because the reference cblas.h (picked up on some
// systems instead of OpenBLAS's) lacks it; an identical redeclaration is fine.
extern "C" void openblas_set_num_threads(int num_threads);

namespace dptrain::cpu_gemm {

void prepare(char** argv) { select_blas_kernel(argv); }

void set_threads(int threads) { openblas_set_num_threads(std::max(1, threads)); }

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

std::string describe() { return blas_description(); }

}  // namespace dptrain::cpu_gemm
