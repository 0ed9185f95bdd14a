// Implements: the CUDA backend's GEMMs (internal to src/backends/cuda/):
// cuBLAS for plain and strided-batched products (fp32, tf32, or bf16
// inputs with fp32 accumulation), cuBLASLt for the dense products' bias,
// GELU and bias-gradient epilogues (lt_matmul.hpp), and cuBLAS's axpy;
// all on row-major data through operand order, on the backend's compute
// stream. cuda_backend.cpp forwards its Backend calls here.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/backend_factory.hpp"

namespace dptrain::cuda {

class Gemms {
 public:
  using Epilogue = Backend::GemmEpilogue;

  Gemms(cudaStream_t stream, const Launch& launch, Precision precision);
  Gemms(const Gemms&) = delete;
  Gemms& operator=(const Gemms&) = delete;

  std::string version() const;  // "cuBLAS 13.0.0"

  // Backend::gemm and Backend::gemm_batched (their contracts).
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand a, int lda,
            GemmOperand b, int ldb, float beta, float* c, int ldc);
  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, std::size_t stride_a, const float* b, int ldb, std::size_t stride_b,
                    float beta, float* c, int ldc, std::size_t stride_c, int batch);
  // Backend::gemm_epilogue and gemm_epilogue_bf16 through cuBLASLt;
  // false where it has no algorithm (or the bf16 form is not this
  // precision's), and the caller runs the Backend's default.
  bool gemm_epilogue(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a, int lda,
                     GemmOperand b, int ldb, float* c, int ldc, Epilogue epilogue, float* vector,
                     float* aux);
  bool gemm_epilogue_bf16(Epilogue epilogue, bool trans_a, bool trans_b, int m, int n, int k,
                          GemmOperand a, int lda, GemmOperand b, int ldb, std::uint16_t* c16,
                          int ldc, std::uint16_t* aux16, const std::uint16_t* vector16);
  // y += x (n values, any count).
  void add(const float* x, float* y, std::size_t n);

 private:
  // The operands of a (batched) GEMM as cuBLAS gets them.
  struct Inputs {
    cublasOperation_t op_a, op_b;
    const void* a;
    const void* b;
    cudaDataType_t type;
    cublasComputeType_t compute;
  };
  Inputs inputs(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a, int lda,
                std::size_t stride_a, GemmOperand b, int ldb, std::size_t stride_b, int batch);
  void grow(DeviceMemory& buf, std::size_t bytes);

  cudaStream_t stream_;
  Launch launch_;
  Precision precision_;
  CublasHandle cublas_;
  std::unique_ptr<LtMatmul> lt_;
  DeviceMemory bf16_a_, bf16_b_;  // operands rounded to bf16 where no copy came
};

}  // namespace dptrain::cuda
