// Implements: the CPU GEMM on oneDNN (see cpu/cpu_gemm.hpp). dnnl_sgemm is
// row-major, JIT-compiles its kernels for the CPU's instruction set once per
// process, and is deterministic for a fixed shape and thread count. It runs
// on the calling thread's OpenMP team. (A matmul primitive per shape wraps
// the same kernels on AVX2 and adds an argument map per call: measured
// slower for the small shapes of a step.)
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "backends/cpu/cpu_gemm.hpp"
#include "backends/cpu/onednn/engine.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cpu_gemm {

void prepare(char** /*argv*/) {}

void set_threads(int /*threads*/) {}  // the OpenMP team, sized by the backend

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                      lda, b, ldb, beta, c, ldc);
  DPT_REQUIRE(st == dnnl_success, ExitCode::kOther,
              "dnnl_sgemm failed (status " + std::to_string(static_cast<int>(st)) + ") for " +
                  std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
}

std::string describe() { return onednn::version() + ", " + onednn::isa_name() + " kernels"; }

}  // namespace dptrain::cpu_gemm
