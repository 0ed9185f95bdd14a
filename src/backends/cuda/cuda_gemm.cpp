// Implements: the CUDA backend's GEMMs of cuda_gemm.hpp. Row-major
// C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: the stored row-major
// matrices are already the column-major transposes, so swapping the
// operands (and m, n) needs no copies.
#include "backends/cuda/cuda_gemm.hpp"

#include <algorithm>

#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {
namespace {

constexpr std::size_t kBf16Bytes = 2;

cublasLtEpilogue_t lt_epilogue(Gemms::Epilogue e) {
  using E = Gemms::Epilogue;
  switch (e) {
    case E::kBias:
    case E::kBiasAdd:  // with C = the addend, beta 1
      return CUBLASLT_EPILOGUE_BIAS;
    case E::kBiasGradA:
      return CUBLASLT_EPILOGUE_BGRADB;
    case E::kBiasGeluTanh:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;  // cuBLASLt's GELU is the tanh form
    case E::kGeluTanhGrad:
      return CUBLASLT_EPILOGUE_DGELU;
    case E::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Elements spanned by a row-major rows x cols matrix with row stride ld.
std::size_t stored_elements(int rows, int cols, int ld) {
  return static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld) +
         static_cast<std::size_t>(cols);
}

}  // namespace

Gemms::Gemms(cudaStream_t stream, const Launch& launch, Precision precision)
    : stream_(stream), launch_(launch), precision_(precision) {
  cublas_ = CublasHandle::create();
  DPT_CUBLAS_CHECK(cublas_api().cublasSetStream_(cublas_.get(), stream_));
  lt_ = std::make_unique<LtMatmul>(stream_);
}

std::string Gemms::version() const {
  int v = 0;
  cublas_api().cublasGetVersion_(cublas_.get(), &v);
  return "cuBLAS " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void Gemms::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand a,
                 int lda, GemmOperand b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_matrix(launch_, c, m, n, ldc, beta);
    return;
  }
  const Inputs in = inputs(trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, 1);
  DPT_CUBLAS_CHECK(cublas_api().cublasGemmEx_(cublas_.get(), in.op_b, in.op_a, n, m, k, &alpha,
                                              in.b, in.type, ldb, in.a, in.type, lda, &beta, c,
                                              CUDA_R_32F, ldc, in.compute, CUBLAS_GEMM_DEFAULT));
}

// Attention's products over N·H heads: one strided-batched cuBLAS call.
void Gemms::gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, std::size_t stride_a, const float* b, int ldb,
                         std::size_t stride_b, float beta, float* c, int ldc,
                         std::size_t stride_c, int batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < batch; ++i)
      scale_matrix(launch_, c + static_cast<std::size_t>(i) * stride_c, m, n, ldc, beta);
    return;
  }
  const Inputs in =
      inputs(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, batch);
  DPT_CUBLAS_CHECK(cublas_api().cublasGemmStridedBatchedEx_(
      cublas_.get(), in.op_b, in.op_a, n, m, k, &alpha, in.b, in.type, ldb,
      static_cast<long long>(stride_b), in.a, in.type, lda, static_cast<long long>(stride_a),
      &beta, c, CUDA_R_32F, ldc, static_cast<long long>(stride_c), batch, in.compute,
      CUBLAS_GEMM_DEFAULT));
}

// The bias over row-major C's columns is over the rows of column-major Cᵀ
// (BIAS, and GELU_AUX_BIAS with aux laid out as C), and op(A)'s sums over
// k are those of cuBLAS's second operand (BGRADB); DGELU reads aux as C.
// In bf16 the bias gradient is summed from the bf16 operand, as the GEMM
// reads it.
bool Gemms::gemm_epilogue(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a,
                          int lda, GemmOperand b, int ldb, float* c, int ldc, Epilogue epilogue,
                          float* vector, float* aux) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  const Inputs in = inputs(trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, 1);
  const LtProblem p{in.op_b, in.op_a, n, m, k, ldb, lda, ldc, in.type, in.compute,
                    lt_epilogue(epilogue)};
  // kBiasAdd: aux is cuBLASLt's C (beta 1), not an epilogue's aux.
  const bool adds = epilogue == Epilogue::kBiasAdd;
  return lt_->run(p, in.b, in.a, c, vector, adds ? nullptr : aux, adds ? aux : nullptr);
}

// D, the aux matrix and the bias in bf16 (cuBLASLt's bf16 epilogues take
// the bias and aux in D's type).
bool Gemms::gemm_epilogue_bf16(Epilogue epilogue, bool trans_a, bool trans_b, int m, int n,
                               int k, GemmOperand a, int lda, GemmOperand b, int ldb,
                               std::uint16_t* c16, int ldc, std::uint16_t* aux16,
                               const std::uint16_t* vector16) {
  if (precision_ != Precision::kBf16 || m <= 0 || n <= 0 || k <= 0) return false;
  const Inputs in = inputs(trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, 1);
  LtProblem p{in.op_b, in.op_a, n, m, k, ldb, lda, ldc, in.type, in.compute,
              lt_epilogue(epilogue)};
  p.d_type = CUDA_R_16BF;
  return lt_->run(p, in.b, in.a, c16, const_cast<std::uint16_t*>(vector16), aux16);
}

void Gemms::add(const float* x, float* y, std::size_t n) {
  // cuBLAS counts in int: chunks below 2^31 values.
  constexpr std::size_t kChunk = std::size_t(1) << 30;
  const float one = 1.0f;
  for (std::size_t done = 0; done < n; done += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, n - done));
    DPT_CUBLAS_CHECK(
        cublas_api().cublasSaxpy_(cublas_.get(), count, &one, x + done, 1, y + done, 1));
  }
}

// In bf16 both operands, all `batch` matrices of them, are first rounded
// into scratch of the same layout (strides in elements stay as they are),
// except an operand the caller handed over rounded already
// (GemmOperand::bf16), read as it is.
Gemms::Inputs Gemms::inputs(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a,
                            int lda, std::size_t stride_a, GemmOperand b, int ldb,
                            std::size_t stride_b, int batch) {
  Inputs in{trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
            a.data, b.data, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  if (precision_ == Precision::kTf32) in.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (precision_ != Precision::kBf16) return in;
  const std::size_t before = static_cast<std::size_t>(batch - 1);
  // Elements to round: none for an operand that comes rounded.
  const std::size_t a_elems =
      a.bf16 ? 0 : before * stride_a + stored_elements(trans_a ? k : m, trans_a ? m : k, lda);
  const std::size_t b_elems =
      b.bf16 ? 0 : before * stride_b + stored_elements(trans_b ? n : k, trans_b ? k : n, ldb);
  grow(bf16_a_, a_elems * kBf16Bytes);
  grow(bf16_b_, b_elems * kBf16Bytes);
  if (a_elems + b_elems > 0)
    to_bf16_pair(launch_, a.data, bf16_a_.get(), a_elems, b.data, bf16_b_.get(), b_elems);
  in.a = a.bf16 ? static_cast<const void*>(a.bf16) : bf16_a_.get();
  in.b = b.bf16 ? static_cast<const void*>(b.bf16) : bf16_b_.get();
  in.type = CUDA_R_16BF;
  return in;
}

// Scratch grows only when a larger GEMM is first seen (the first step), so
// the steady state allocates nothing.
void Gemms::grow(DeviceMemory& buf, std::size_t bytes) {
  if (buf.bytes() >= bytes) return;
  DPT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued GEMMs may read the old one
  buf = DeviceMemory();
  buf = DeviceMemory(bytes);
}

}  // namespace dptrain::cuda
