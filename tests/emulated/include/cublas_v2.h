// Implements: the part of cuBLAS the CUDA backend calls, for the host
// emulation (tests/emulated/), written from cuBLAS's definitions rather than
// from the backend's use of them, so that the backend's row-major mapping
// (operand order, transposes, leading dimensions) and its precisions are
// tested against them:
//   cublasGemmEx: column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] +
//     beta C, element (i, j) of a matrix X at X[i + j ld]; op(X) = X or X^T;
//     the leading dimensions checked as cuBLAS checks them; C is not read
//     when beta is 0; CUDA_R_16BF operands read as bf16; under
//     CUBLAS_COMPUTE_32F_FAST_TF32 every operand rounded to TF32 (10
//     mantissa bits, to nearest even) first; fp32 accumulation.
//   cublasGemmStridedBatchedEx: batchCount of those, the i-th on
//     A + i strideA, B + i strideB, C + i strideC (strides in elements).
//   cublasSaxpy: y += alpha x.
// Both are checked when called and run when the handle's stream gets to
// them (streams.hpp); alpha and beta are read from host memory when called
// (cuBLAS's default pointer mode).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

typedef struct cublasContextEmulated {
  cudaStream_t stream = nullptr;
}* cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContextEmulated;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetVersion(cublasHandle_t, int* v) {
  *v = 130000;
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
         : s == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
                                            : "CUBLAS_STATUS_NOT_SUPPORTED";
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "refused by the emulation";
}

namespace dptrain_emu {

inline float to_tf32(float x) {  // round to nearest even at mantissa bit 10
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // Inf, NaN
  return std::bit_cast<float>((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}

inline float gemm_operand(const void* p, cudaDataType_t type, std::size_t i, bool tf32) {
  const float v = type == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                                      : static_cast<const float*>(p)[i];
  return tf32 ? to_tf32(v) : v;
}

}  // namespace dptrain_emu

namespace dptrain_emu {

struct GemmOperands {
  bool ta, tb, tf32;
  int m, n, k, lda, ldb, ldc;
  const void *A, *B;
  cudaDataType_t atype, btype;
  float alpha, beta;
  float* C;
};

inline void run_gemm(const GemmOperands& g) {
  const int m = g.m, n = g.n, k = g.k;
  // op(A) by rows and op(B) by columns, each run over l contiguous.
  std::vector<float> rows_a(std::size_t(m) * k), cols_b(std::size_t(n) * k);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l)
      rows_a[std::size_t(i) * k + l] = gemm_operand(
          g.A, g.atype, g.ta ? l + std::size_t(i) * g.lda : i + std::size_t(l) * g.lda, g.tf32);
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l)
      cols_b[std::size_t(j) * k + l] = gemm_operand(
          g.B, g.btype, g.tb ? j + std::size_t(l) * g.ldb : l + std::size_t(j) * g.ldb, g.tf32);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float* ra = rows_a.data() + std::size_t(i) * k;
      const float* cb = cols_b.data() + std::size_t(j) * k;
      float sum = 0.0f;
      for (int l = 0; l < k; ++l) sum += ra[l] * cb[l];
      float& out = g.C[std::size_t(i) + std::size_t(j) * g.ldc];
      out = g.beta == 0.0f ? g.alpha * sum : g.alpha * sum + g.beta * out;
    }
}

}  // namespace dptrain_emu

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t atype, int lda,
                                   const void* B, cudaDataType_t btype, int ldb, const void* beta,
                                   void* C, cudaDataType_t ctype, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) ||
      ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m) || ctype != CUDA_R_32F ||
      atype != btype || !dptrain_emu::is_device_pointer(A) ||
      !dptrain_emu::is_device_pointer(B) || !dptrain_emu::is_device_pointer(C))
    return CUBLAS_STATUS_INVALID_VALUE;
  const dptrain_emu::GemmOperands g{ta, tb, compute == CUBLAS_COMPUTE_32F_FAST_TF32,
                                    m, n, k, lda, ldb, ldc, A, B, atype, btype,
                                    *static_cast<const float*>(alpha),
                                    *static_cast<const float*>(beta), static_cast<float*>(C)};
  dptrain_emu::enqueue(h->stream, [g] { dptrain_emu::run_gemm(g); });
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType_t atype, int lda, long long strideA,
    const void* B, cudaDataType_t btype, int ldb, long long strideB, const void* beta, void* C,
    cudaDataType_t ctype, int ldc, long long strideC, int batch, cublasComputeType_t compute,
    cublasGemmAlgo_t algo) {
  if (batch < 0 || strideA < 0 || strideB < 0 || strideC < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const std::size_t a_bytes = atype == CUDA_R_16BF ? 2 : 4, b_bytes = btype == CUDA_R_16BF ? 2 : 4;
  for (int i = 0; i < batch; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const cublasStatus_t rc = cublasGemmEx(
        h, transa, transb, m, n, k, alpha, static_cast<const char*>(A) + at * strideA * a_bytes,
        atype, lda, static_cast<const char*>(B) + at * strideB * b_bytes, btype, ldb, beta,
        static_cast<float*>(C) + at * strideC, ctype, ldc, compute, algo);
    if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  }
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSaxpy(cublasHandle_t h, int n, const float* alpha, const float* x,
                                  int incx, float* y, int incy) {
  if (n < 0 || !dptrain_emu::is_device_pointer(x) || !dptrain_emu::is_device_pointer(y))
    return CUBLAS_STATUS_INVALID_VALUE;
  dptrain_emu::enqueue(h->stream, [n, a = *alpha, x, incx, y, incy] {
    for (int i = 0; i < n; ++i) y[std::size_t(i) * incy] += a * x[std::size_t(i) * incx];
  });
  return CUBLAS_STATUS_SUCCESS;
}
