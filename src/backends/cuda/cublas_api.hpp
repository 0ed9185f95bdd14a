// Implements: the cuBLAS and cuBLASLt entry points the CUDA backend calls,
// taken from the libraries when the first caller asks for them (dlopen),
// not linked: a process that never makes a CUDA backend never maps them.
// Loading libcublasLt alone costs a process about 150 MiB of resident
// memory (its initializers), which every CPU rank of a CUDA-enabled build
// used to pay. Calls read `cublas_api().cublasGemmEx_(...)`: the field of a
// function is its name with an underscore. On the host emulation the table
// holds the emulated functions (tests/emulated/include/).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace dptrain::cuda {

// The C signatures of the two GEMMs, which C++ code also sees overloaded
// (cuBLAS's wrappers taking a cudaDataType compute type).
using GemmExFunction = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int, int, int, const void*, const void*, cudaDataType_t,
                                          int, const void*, cudaDataType_t, int, const void*, void*,
                                          cudaDataType_t, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedExFunction = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType_t, int, long long, const void*, cudaDataType_t, int, long long, const void*, void*,
    cudaDataType_t, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);

// X(name, type of a pointer to it) for every function of each library the
// backend calls.
#define DPT_CUBLAS_FUNCTIONS(X)                                                            \
  X(cublasCreate, decltype(&cublasCreate)) X(cublasDestroy, decltype(&cublasDestroy))     \
  X(cublasSetStream, decltype(&cublasSetStream))                                          \
  X(cublasGetVersion, decltype(&cublasGetVersion)) X(cublasGemmEx, GemmExFunction)        \
  X(cublasGemmStridedBatchedEx, GemmStridedBatchedExFunction)                             \
  X(cublasSaxpy, decltype(&cublasSaxpy))                                                  \
  X(cublasGetStatusName, decltype(&cublasGetStatusName))                                  \
  X(cublasGetStatusString, decltype(&cublasGetStatusString))
#define DPT_CUBLASLT_FUNCTIONS(X)                                                          \
  X(cublasLtCreate, decltype(&cublasLtCreate)) X(cublasLtDestroy, decltype(&cublasLtDestroy)) \
  X(cublasLtMatmul, decltype(&cublasLtMatmul))                                            \
  X(cublasLtMatmulDescCreate, decltype(&cublasLtMatmulDescCreate))                        \
  X(cublasLtMatmulDescDestroy, decltype(&cublasLtMatmulDescDestroy))                      \
  X(cublasLtMatmulDescSetAttribute, decltype(&cublasLtMatmulDescSetAttribute))            \
  X(cublasLtMatrixLayoutCreate, decltype(&cublasLtMatrixLayoutCreate))                    \
  X(cublasLtMatrixLayoutDestroy, decltype(&cublasLtMatrixLayoutDestroy))                  \
  X(cublasLtMatmulPreferenceCreate, decltype(&cublasLtMatmulPreferenceCreate))            \
  X(cublasLtMatmulPreferenceDestroy, decltype(&cublasLtMatmulPreferenceDestroy))          \
  X(cublasLtMatmulPreferenceSetAttribute, decltype(&cublasLtMatmulPreferenceSetAttribute)) \
  X(cublasLtMatmulAlgoGetHeuristic, decltype(&cublasLtMatmulAlgoGetHeuristic))           \
  X(cublasLtMatmulAlgoCapGetAttribute, decltype(&cublasLtMatmulAlgoCapGetAttribute))

// (cublas_v2.h makes some names macros for their _v2 functions: the field
// keeps the name as written, its type and symbol are the function's.)
#define DPT_CUBLAS_FIELD(name, type) type name##_ = nullptr;
struct CublasApi {
  DPT_CUBLAS_FUNCTIONS(DPT_CUBLAS_FIELD)
  DPT_CUBLASLT_FUNCTIONS(DPT_CUBLAS_FIELD)
};
#undef DPT_CUBLAS_FIELD

// The table, loaded on the first call (thread-safe); Error(kOther) naming
// the library or symbol and dlerror's reason when one cannot be loaded.
const CublasApi& cublas_api();

}  // namespace dptrain::cuda
