// Implements: GEMMs with an epilogue on cuBLASLt (internal to
// src/backends/cuda/): the bias added to the product, or the bias gradient
// summed from an operand, inside the GEMM's own kernel, so that neither
// takes a pass over memory of its own. Column-major, as cuBLAS: the
// backend maps its row-major calls onto it as it does for cublasGemmEx.
// The plan of a problem (descriptors and the algorithm cuBLASLt's
// heuristics rank first among those that can run it, at the alignment of
// its pointers; none where a launch refuses it) is made
// once, the first time the problem is seen, and kept: the same problem
// always runs the same algorithm, so a run repeats bit for bit on the same
// GPU and library (cuBLASLt's reductions, split-K among them, do not use
// atomics). The workspace is fixed, so no step allocates.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "backends/cuda/cuda_handles.hpp"

namespace dptrain::cuda {

// D[m, n] = op(A)[m, k] op(B)[k, n], then the epilogue:
//   CUBLASLT_EPILOGUE_BIAS:   D[i, j] += vector[i]          (vector in, length m)
//   CUBLASLT_EPILOGUE_BGRADB: vector[j] = sum_l op(B)[l, j]  (vector out, length n)
//   CUBLASLT_EPILOGUE_GELU_AUX_BIAS: aux[i, j] = D[i, j] + vector[i], D = GELU(aux)
//                             (GELU's tanh form; aux fp32, leading dimension ldd)
//   CUBLASLT_EPILOGUE_DGELU:  D[i, j] *= GELU'(aux[i, j])  (aux in, as above)
// With a C (run's c; fp32 D only), D = op(A) op(B) + C first (beta 1, C
// laid out as D and apart from it): a block's shortcut added by the GEMM
// of its last part. A and B of `type` (fp32 or bf16), D of d_type (fp32;
// or bf16, with A and B bf16, the bias and aux then bf16 too, as cuBLASLt
// takes them), accumulated in `compute`.
struct LtProblem {
  cublasOperation_t op_a, op_b;
  int m, n, k, lda, ldb, ldd;
  cudaDataType_t type;
  cublasComputeType_t compute;
  cublasLtEpilogue_t epilogue;
  cudaDataType_t d_type = CUDA_R_32F;
};

class LtMatmul {
 public:
  explicit LtMatmul(cudaStream_t stream);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Queues the problem on the stream; false, queuing nothing, where
  // cuBLASLt has no algorithm for it at these pointers' alignments (the
  // caller then runs the GEMM and the epilogue apart).
  bool run(const LtProblem& p, const void* a, const void* b, void* d, void* vector,
           void* aux = nullptr, const void* c = nullptr);

  static constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;  // cuBLAS's advice for Hopper
  static constexpr int kCandidates = 8;  // algorithms asked of the heuristics, best first

 private:
  struct Plan;
  // The problem and the alignments (up to 16 bytes) of a, b, d, vector,
  // aux and c (0: none).
  using Key = std::array<std::int64_t, 17>;
  Plan& plan(const LtProblem& p, const Key& key, void* vector, void* aux);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceMemory workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace dptrain::cuda
