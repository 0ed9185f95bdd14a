// Implements: the part of cuBLASLt the CUDA backend calls, for the host
// emulation (tests/emulated/), written from cuBLASLt's definitions:
//   cublasLtMatmul: column-major D[m, n] = alpha op(A)[m, k] op(B)[k, n] +
//     beta C (C == D, or apart from D with D's layout and an fp32 D: C is
//     then copied into D first, then the same), m and n from D's
//     layout and k from A's, every layout checked against the transposes
//     and leading dimensions; A and B of one type (fp32 or bf16), D fp32,
//     tf32 rounding of the operands under CUBLAS_COMPUTE_32F_FAST_TF32, as
//     cublasGemmEx (cublas_v2.h) computes; then the epilogue:
//       CUBLASLT_EPILOGUE_BIAS:   D[i, j] += bias[i] (bias length m, fp32;
//         after beta C: (P + C) + bias)
//       CUBLASLT_EPILOGUE_BGRADB: bias[j] = sum over l of op(B)[l, j] as
//         stored (bf16 values where B is bf16), summed in fp32 in l order.
//       CUBLASLT_EPILOGUE_GELU_AUX_BIAS: v = D[i, j] + bias[i] is stored in
//         aux (fp32, leading dimension AUX_LD) and D[i, j] = GELU(v), GELU's
//         tanh form with the float operations of the CUDA backend's
//         activation kernel (elementwise.cu), so the two agree bit for bit.
//       CUBLASLT_EPILOGUE_DGELU: D[i, j] *= GELU'(aux[i, j]), the derivative
//         as that kernel's backward computes it.
//     D may be bf16 (with A and B bf16, beta 0) for DEFAULT, BIAS and the two GELU
//     epilogues: the product and the epilogue run in fp32 as above, the bias and aux
//     are then of D's type (bf16), as cuBLASLt takes them (cublasLt.h,
//     BIAS_DATA_TYPE and EPILOGUE_AUX_DATA_TYPE default to D's type), and
//     D and aux are stored rounded to nearest even.
//   cublasLtMatmulAlgoGetHeuristic: algorithms for DEFAULT, BIAS,
//     BGRADB, GELU_AUX_BIAS and DGELU where AUX_LD is, as cuBLASLt requires,
//     a multiple of 8 no less than D's rows (none for other epilogues, or,
//     while dptrain_emu::lt_refusal() is set, for any but DEFAULT with an
//     fp32 D, so that the callers' fallbacks are tested): asked for more
//     than one, the first is in place only (C == D;
//     cublasLtMatmul answers NOT_SUPPORTED to it with a C apart, as a real
//     one without CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT may), the
//     second takes either (cublasLtMatmulAlgoCapGetAttribute says which);
//     an algorithm records the minimum alignments of A, B and D
//     it was chosen for, and cublasLtMatmul refuses pointers below them,
//     as a real kernel chosen for aligned operands would misread them;
//     dptrain_emu::lt_calls() counts the calls it accepted, and
//     lt_epilogue_calls(e) those with epilogue e.
// The call is checked when made and runs when the stream gets to it
// (streams.hpp); alpha and beta are read from host memory when called.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"

typedef struct cublasLtContextEmulated {
  int unused;
}* cublasLtHandle_t;
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_BGRADB = 512,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
} cublasLtEpilogue_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;
typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
typedef enum {
  CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT = 4,
} cublasLtMatmulAlgoCapAttributes_t;

struct cublasLtMatmulDescEmulated {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  void* aux = nullptr;
  std::int64_t aux_ld = 0;
};
typedef cublasLtMatmulDescEmulated* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutEmulated {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
typedef cublasLtMatrixLayoutEmulated* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceEmulated {
  std::uint64_t workspace = 0;
  std::uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;
};
typedef cublasLtMatmulPreferenceEmulated* cublasLtMatmulPreference_t;
typedef struct {
  std::uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

namespace dptrain_emu {
// While true, the heuristics find no algorithm for any epilogue but DEFAULT.
inline bool& lt_refusal() {
  static bool refusing = false;
  return refusing;
}
// cublasLtMatmul calls accepted so far, so that tests can tell which path ran;
// and of them, those with one epilogue.
inline long& lt_calls() {
  static long calls = 0;
  return calls;
}
inline long& lt_epilogue_calls(std::uint32_t epilogue) {
  static std::map<std::uint32_t, long> calls;
  return calls[epilogue];
}
inline bool lt_gelu(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU;
}
// GELU's tanh form and its derivative, operation for operation as the CUDA
// backend's activation kernels (src/backends/cuda/elementwise.cu).
inline float lt_gelu_forward(float v) {
  constexpr float beta = 0.7978845608028654f, kappa = 0.044715f;
  return 0.5f * v * (1.0f + tanhf(beta * (v + kappa * v * v * v)));
}
inline float lt_gelu_slope(float v) {
  constexpr float beta = 0.7978845608028654f, kappa = 0.044715f;
  const float v_sq = v * v;
  const float t = tanhf(beta * (v + kappa * v_sq * v));
  const float left = 0.5f * v, right = 1.0f + t;
  const float right_derivative = left * (1.0f - t * t) * beta * (1.0f + 3.0f * kappa * v_sq);
  return 0.5f * right + right_derivative;
}
inline std::uint64_t lt_alignment(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::uint64_t a = 16;
  while (a > 1 && at % a != 0) a /= 2;
  return a;
}
}  // namespace dptrain_emu

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContextEmulated{0};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  *d = new cublasLtMatmulDescEmulated{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, std::size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof(std::int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->transa : &d->transb, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->epilogue, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER ? &d->bias : &d->aux, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (size != sizeof(std::int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->aux_ld, buf, size);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                                                 std::uint64_t rows, std::uint64_t cols,
                                                 std::int64_t ld) {
  if (ld < static_cast<std::int64_t>(rows < 1 ? 1 : rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutEmulated{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceEmulated;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* buf, std::size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(std::uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&p->workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::uint32_t* to = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? &p->align_a
                      : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? &p->align_b
                      : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? &p->align_c
                      : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? &p->align_d
                                                                           : nullptr;
  if (!to) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(to, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

namespace dptrain_emu {
// The problem's m, n, k from the layouts, or false where they disagree.
inline bool lt_shape(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t dl, int* m, int* n, int* k) {
  const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  *m = static_cast<int>(dl->rows);
  *n = static_cast<int>(dl->cols);
  *k = static_cast<int>(ta ? a->rows : a->cols);
  const std::uint64_t am = ta ? a->cols : a->rows, bk = tb ? b->cols : b->rows,
                      bn = tb ? b->rows : b->cols;
  const bool d_bf16 = dl->type == CUDA_R_16BF && a->type == CUDA_R_16BF &&
                     (lt_gelu(d->epilogue) || d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                      d->epilogue == CUBLASLT_EPILOGUE_DEFAULT);
  return am == dl->rows && bk == std::uint64_t(*k) && bn == dl->cols && a->type == b->type &&
         (dl->type == CUDA_R_32F || d_bf16) && d->scale == CUDA_R_32F &&
         (d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_FAST_TF32);
}
}  // namespace dptrain_emu

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t pref,
    int requested, cublasLtMatmulHeuristicResult_t* results, int* found) {
  int m = 0, n = 0, k = 0;
  if (requested < 1 || !dptrain_emu::lt_shape(d, a, b, dl, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  *found = 0;
  const bool aux_fits = d->aux_ld >= m && d->aux_ld % 8 == 0;
  const bool known = d->epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                     d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_BGRADB ||
                     (dptrain_emu::lt_gelu(d->epilogue) && aux_fits);
  const bool refused = d->epilogue != CUBLASLT_EPILOGUE_DEFAULT || dl->type == CUDA_R_16BF;
  if (!known || (refused && dptrain_emu::lt_refusal()))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  *found = requested > 1 ? 2 : 1;
  for (int r = 0; r < *found; ++r) {
    results[r] = {};
    results[r].algo.data[0] = pref->align_a;
    results[r].algo.data[1] = pref->align_b;
    results[r].algo.data[2] = pref->align_d;
    results[r].algo.data[3] = *found == 1 || r == 1;  // out of place
    results[r].state = CUBLAS_STATUS_SUCCESS;
    results[r].wavesCount = 1.0f;
  }
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                        cublasLtMatmulAlgoCapAttributes_t attr,
                                                        void* buf, std::size_t size,
                                                        std::size_t* written) {
  if (!algo || attr != CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT || size < sizeof(std::int32_t))
    return CUBLAS_STATUS_INVALID_VALUE;
  const std::int32_t v = static_cast<std::int32_t>(algo->data[3]);
  std::memcpy(buf, &v, sizeof v);
  if (written) *written = sizeof v;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t a, const void* B,
                                     cublasLtMatrixLayout_t b, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t, void* D, cublasLtMatrixLayout_t dl,
                                     const cublasLtMatmulAlgo_t* algo, void*, std::size_t,
                                     cudaStream_t stream) {
  int m = 0, n = 0, k = 0;
  using dptrain_emu::lt_alignment;
  const bool c_apart = C != D;
  if (!algo || !dptrain_emu::lt_shape(d, a, b, dl, &m, &n, &k) ||
      (c_apart && (dl->type != CUDA_R_32F || !dptrain_emu::is_device_pointer(C))) ||
      !dptrain_emu::is_device_pointer(A) || !dptrain_emu::is_device_pointer(B) ||
      !dptrain_emu::is_device_pointer(D) || lt_alignment(A) < algo->data[0] ||
      lt_alignment(B) < algo->data[1] || lt_alignment(D) < algo->data[2])
    return CUBLAS_STATUS_INVALID_VALUE;
  if (c_apart && !algo->data[3]) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool with_vector =
      d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_DGELU;
  if (with_vector && (!d->bias || !dptrain_emu::is_device_pointer(d->bias)))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool gelu = dptrain_emu::lt_gelu(d->epilogue);
  if (gelu && (!d->aux || !dptrain_emu::is_device_pointer(d->aux) || d->aux_ld < m))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool d_bf16 = dl->type == CUDA_R_16BF;
  if (d_bf16 && *static_cast<const float*>(beta) != 0.0f) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool tb = d->transb == CUBLAS_OP_T;
  // A bf16 D: the product in fp32 into a buffer of its own (ld m), stored
  // rounded after the epilogue; each run makes its own (a graph replays the
  // work, graphs.hpp).
  auto* d16 = d_bf16 ? static_cast<__nv_bfloat16*>(D) : nullptr;
  float* wide = d_bf16 ? nullptr : static_cast<float*>(D);
  const dptrain_emu::GemmOperands operands{
      d->transa == CUBLAS_OP_T, tb, d->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
      m, n, k, static_cast<int>(a->ld), static_cast<int>(b->ld),
      d_bf16 ? m : static_cast<int>(dl->ld), A, B, a->type, b->type,
      *static_cast<const float*>(alpha), *static_cast<const float*>(beta), wide};
  const std::uint32_t epilogue = d->epilogue;
  void* vector_any = d->bias;
  float* vector = static_cast<float*>(d->bias);
  void* aux_any = d->aux;
  const std::size_t aux_ld = static_cast<std::size_t>(d->aux_ld), d_ld = dl->ld;
  ++dptrain_emu::lt_calls();
  ++dptrain_emu::lt_epilogue_calls(epilogue);
  const float* c_in = c_apart ? static_cast<const float*>(C) : nullptr;
  dptrain_emu::enqueue(stream, [operands, epilogue, vector, vector_any, aux_any, aux_ld, tb, d16,
                                d_ld, c_in] {
    dptrain_emu::GemmOperands g = operands;
    std::vector<float> wide_d(d16 ? std::size_t(g.m) * std::size_t(g.n) : 0);
    if (d16) g.C = wide_d.data();
    for (int j = 0; c_in && j < g.n; ++j)  // D's layout, D's leading dimension
      for (int i = 0; i < g.m; ++i)
        g.C[std::size_t(i) + std::size_t(j) * g.ldc] =
            c_in[std::size_t(i) + std::size_t(j) * g.ldc];
    dptrain_emu::run_gemm(g);
    for (int j = 0; dptrain_emu::lt_gelu(epilogue) && j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        float& out = g.C[std::size_t(i) + std::size_t(j) * g.ldc];
        const std::size_t at = std::size_t(i) + std::size_t(j) * aux_ld;
        if (d16) {  // bias and aux in bf16
          auto* aux16 = static_cast<__nv_bfloat16*>(aux_any);
          if (epilogue == CUBLASLT_EPILOGUE_DGELU) {
            out = dptrain_emu::lt_gelu_slope(__bfloat162float(aux16[at])) * out;
          } else {
            const float v =
                out + __bfloat162float(static_cast<const __nv_bfloat16*>(vector_any)[i]);
            aux16[at] = __float2bfloat16_rn(v);
            out = dptrain_emu::lt_gelu_forward(v);
          }
          continue;
        }
        float& in = static_cast<float*>(aux_any)[at];
        if (epilogue == CUBLASLT_EPILOGUE_DGELU) {
          out = dptrain_emu::lt_gelu_slope(in) * out;
        } else {
          in = out + vector[i];
          out = dptrain_emu::lt_gelu_forward(in);
        }
      }
    if (d16) {
      const auto* bias16 = static_cast<const __nv_bfloat16*>(vector_any);
      for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.m; ++i) {
          float v = g.C[std::size_t(i) + std::size_t(j) * g.ldc];
          if (epilogue == CUBLASLT_EPILOGUE_BIAS) v += __bfloat162float(bias16[i]);
          d16[std::size_t(i) + std::size_t(j) * d_ld] = __float2bfloat16_rn(v);
        }
      return;
    }
    if (epilogue == CUBLASLT_EPILOGUE_BIAS)
      for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.m; ++i) g.C[std::size_t(i) + std::size_t(j) * g.ldc] += vector[i];
    if (epilogue == CUBLASLT_EPILOGUE_BGRADB)
      for (int j = 0; j < g.n; ++j) {
        float sum = 0.0f;
        for (int l = 0; l < g.k; ++l)
          sum += dptrain_emu::gemm_operand(
              g.B, g.btype, tb ? j + std::size_t(l) * g.ldb : l + std::size_t(j) * g.ldb, false);
        vector[j] = sum;
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
