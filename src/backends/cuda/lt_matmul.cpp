// Implements: cuBLASLt GEMMs with epilogues (see lt_matmul.hpp): the plans,
// made on first sight of a problem, and the calls.
#include "backends/cuda/lt_matmul.hpp"

#include <cstdint>

#include "backends/cuda/error_cuda.hpp"

namespace dptrain::cuda {
namespace {

// The largest power of two up to 16 that divides the address.
std::int64_t alignment(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::int64_t a = 16;
  while (a > 1 && at % static_cast<std::uintptr_t>(a) != 0) a /= 2;
  return a;
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatmulDescSetAttribute_(desc, attr, &value, sizeof value));
}

template <typename T>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
         const T& value) {
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceSetAttribute_(pref, attr, &value, sizeof value));
}

bool out_of_place(const cublasLtMatmulAlgo_t& algo) {
  std::int32_t yes = 0;
  std::size_t written = 0;
  return cublas_api().cublasLtMatmulAlgoCapGetAttribute_(
             &algo, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &yes, sizeof yes, &written) ==
             CUBLAS_STATUS_SUCCESS &&
         yes != 0;
}

}  // namespace

struct LtMatmul::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
  ~Plan() {
    if (d) cublas_api().cublasLtMatrixLayoutDestroy_(d);
    if (b) cublas_api().cublasLtMatrixLayoutDestroy_(b);
    if (a) cublas_api().cublasLtMatrixLayoutDestroy_(a);
    if (desc) cublas_api().cublasLtMatmulDescDestroy_(desc);
  }
};

LtMatmul::LtMatmul(cudaStream_t stream) : stream_(stream), workspace_(kWorkspaceBytes) {
  DPT_CUBLAS_CHECK(cublas_api().cublasLtCreate_(&handle_));
}

LtMatmul::~LtMatmul() {
  plans_.clear();
  if (handle_) cublas_api().cublasLtDestroy_(handle_);
}

LtMatmul::Plan& LtMatmul::plan(const LtProblem& p, const Key& key, void* vector, void* aux) {
  auto& slot = plans_[key];
  if (slot) return *slot;
  auto made = std::make_unique<Plan>();
  Plan& pl = *made;
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatmulDescCreate_(&pl.desc, p.compute, CUDA_R_32F));
  set(pl.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(p.op_a));
  set(pl.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(p.op_b));
  set(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(p.epilogue));
  set(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
  if (aux) {  // GELU's input, laid out as D
    set(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(p.ldd));
  }
  const bool ta = p.op_a == CUBLAS_OP_T, tb = p.op_b == CUBLAS_OP_T;
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatrixLayoutCreate_(&pl.a, p.type, ta ? p.k : p.m, ta ? p.m : p.k, p.lda));
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatrixLayoutCreate_(&pl.b, p.type, tb ? p.n : p.k, tb ? p.k : p.n, p.ldb));
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatrixLayoutCreate_(&pl.d, p.d_type, p.m, p.n, p.ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  DPT_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceCreate_(&pref));
  set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(kWorkspaceBytes));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(key[10]));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(key[11]));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      static_cast<std::uint32_t>(key[16] > 0 ? key[16] : key[12]));
  set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(key[12]));
  cublasLtMatmulHeuristicResult_t ranked[kCandidates] = {};
  int found = 0;
  const cublasStatus_t rc = cublas_api().cublasLtMatmulAlgoGetHeuristic_(
      handle_, pl.desc, pl.a, pl.b, pl.d, pl.d, pref, kCandidates, ranked, &found);
  cublas_api().cublasLtMatmulPreferenceDestroy_(pref);
  // The first ranked that can run the problem (with a C apart from D, one
  // that writes out of place); NOT_SUPPORTED or none: this problem runs
  // without the epilogue.
  const bool c_apart = key[16] > 0;
  for (int i = 0; rc == CUBLAS_STATUS_SUCCESS && i < found && !pl.supported; ++i)
    if (ranked[i].state == CUBLAS_STATUS_SUCCESS && (!c_apart || out_of_place(ranked[i].algo))) {
      pl.algo = ranked[i].algo;
      pl.supported = true;
    }
  slot = std::move(made);
  return pl;
}

bool LtMatmul::run(const LtProblem& p, const void* a, const void* b, void* d, void* vector,
                   void* aux, const void* c) {
  if (c && p.d_type != CUDA_R_32F) return false;  // a C only with an fp32 D
  const Key key{p.op_a, p.op_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.type,
                p.compute * 4096 + p.epilogue, alignment(a), alignment(b), alignment(d),
                alignment(vector), aux ? alignment(aux) : 0, p.d_type, c ? alignment(c) : 0};
  Plan& pl = plan(p, key, vector, aux);
  if (!pl.supported) return false;
  set(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
  if (aux) set(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t rc = cublas_api().cublasLtMatmul_(
      handle_, pl.desc, &one, a, pl.a, b, pl.b, c ? &one : &zero, c ? c : d, pl.d, d, pl.d,
      &pl.algo, workspace_.get(), kWorkspaceBytes, stream_);
  // An algorithm the heuristics offered but the launch refuses (nothing is
  // queued then): the problem runs without the epilogue from now on. The
  // plan is keyed by alignments up to 16 bytes while the heuristics saw the
  // first call's pointers, so a later call's may not suit the algorithm:
  // cuBLASLt answers INVALID_VALUE for that, and the problem falls back too.
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || rc == CUBLAS_STATUS_INVALID_VALUE) {
    pl.supported = false;
    return false;
  }
  DPT_CUBLAS_CHECK(rc);
  return true;
}

}  // namespace dptrain::cuda
