// Implements: the cuBLAS names that src/cuda/'s shared headers mention, for
// the host emulation. No GEMM is emulated: the emulated backend runs GEMMs
// on the CPU backend, since cuBLAS is not code of this project.
#pragma once

typedef struct cublasContextEmulated* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;

inline cublasStatus_t cublasCreate(cublasHandle_t*) { return CUBLAS_STATUS_NOT_SUPPORTED; }
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char* cublasGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "not emulated";
}
