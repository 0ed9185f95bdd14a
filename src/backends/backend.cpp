// Implements: what the Backend interface defines itself — the kernel
// registry (family indices, registration, destruction order), the refusal
// of a family a backend lacks, and the default gradient check over the
// optimizer family's sum of squares, the default GEMM epilogues over
// the dense family's kernels, and the refusal to record work (the CPU's).
#include "dptrain/backends/backend.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

std::size_t kernel_family_detail::next_index() noexcept {
  static std::atomic<std::size_t> next{0};
  return next++;
}

void KernelRegistry::insert(std::size_t index, std::unique_ptr<KernelFamily> table,
                            const char* name) {
  if (!table)
    throw Error(ExitCode::kOther, std::string("kernel family '") + name + "': null table");
  if (index >= tables_.size()) tables_.resize(index + 1);
  if (tables_[index])
    throw Error(ExitCode::kOther,
                std::string("kernel family '") + name + "' registered twice on one backend");
  tables_[index] = std::move(table);
  registered_.push_back(index);
}

void KernelRegistry::clear() noexcept {
  for (auto it = registered_.rbegin(); it != registered_.rend(); ++it) tables_[*it].reset();
  registered_.clear();
  tables_.clear();
}

void Backend::throw_missing_family(const std::string& what) const {
  throw Error(ExitCode::kUsage, "the " + name() + " backend has no " + what);
}

void Backend::gemm_epilogue_bf16(GemmEpilogue epilogue, bool trans_a, bool trans_b, int m,
                                 int n, int k, GemmOperand a, int lda, GemmOperand b, int ldb,
                                 std::uint16_t* c16, int ldc, std::uint16_t* aux16,
                                 const float* vector, const std::uint16_t*, float* scratch,
                                 float* scratch2, int scratch_rows) {
  DPT_REQUIRE(ldc == n && epilogue != GemmEpilogue::kBiasGradA &&
                  epilogue != GemmEpilogue::kBiasAdd,
              ExitCode::kOther,
              "gemm_epilogue_bf16: kNone, kBias or a gelu:tanh epilogue with ldc == n");
  ConvertKernels& convert = kernels<ConvertKernels>();
  if (epilogue == GemmEpilogue::kBias || epilogue == GemmEpilogue::kNone) {
    // Row chunks of op(A): rows of A, or columns where it is transposed.
    const int chunk = scratch_rows > 0 ? std::min(scratch_rows, m) : m;
    for (int r = 0; r < m; r += chunk) {
      const int rows = std::min(chunk, m - r);
      const std::size_t at = trans_a ? std::size_t(r) : std::size_t(r) * std::size_t(lda);
      const GemmOperand part{a.data + at, a.bf16 ? a.bf16 + at : nullptr};
      gemm_epilogue(trans_a, trans_b, rows, n, k, part, lda, b, ldb, scratch, ldc, epilogue,
                    const_cast<float*>(vector));
      convert.to_bf16(scratch, c16 + std::size_t(r) * std::size_t(ldc),
                      std::size_t(rows) * std::size_t(n));
    }
    return;
  }
  const std::size_t values = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  if (epilogue == GemmEpilogue::kGeluTanhGrad) convert.from_bf16(aux16, scratch2, values);
  gemm_epilogue(trans_a, trans_b, m, n, k, a, lda, b, ldb, scratch, ldc, epilogue,
                const_cast<float*>(vector), scratch2);
  if (epilogue == GemmEpilogue::kBiasGeluTanh) convert.to_bf16(scratch2, aux16, values);
  convert.to_bf16(scratch, c16, values);
}

void Backend::sum(const float* a, const float* b, float* y, std::size_t n, std::uint16_t* y16) {
  if (y == b) {
    add(a, y, n);
  } else {
    copy_device(y, a, n * sizeof(float));
    add(b, y, n);
  }
  if (y16) kernels<ConvertKernels>().to_bf16(y, y16, n);
}

std::unique_ptr<Backend::RecordedWork> Backend::record(const std::function<void()>& /*work*/,
                                                      std::string* why) {
  if (why) *why = "the " + name() + " backend runs each call as it is made";
  return nullptr;
}

Backend::GradientCheck Backend::check_gradients(const float* g, std::size_t n, bool norm) {
  return {count_nonfinite(g, n), norm ? kernels<OptimizerKernels>().sum_squares(g, n) : 0.0};
}

void Backend::gemm_epilogue(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a,
                            int lda, GemmOperand b, int ldb, float* c, int ldc,
                            GemmEpilogue epilogue, float* vector, float* aux) {
  const bool grad_a = epilogue == GemmEpilogue::kBiasGradA;
  const bool gelu = epilogue == GemmEpilogue::kBiasGeluTanh || epilogue == GemmEpilogue::kGeluTanhGrad;
  const bool adds = epilogue == GemmEpilogue::kBiasAdd;
  if (grad_a ? !trans_a || lda != m : ldc != n || ((gelu || adds) && !aux) || (adds && aux == c))
    throw Error(ExitCode::kOther,
                std::string("the ") + name() + " backend's GEMM epilogue needs " +
                    (grad_a ? "trans_a and lda == m"
                     : adds ? "ldc == n and an aux apart from c"
                     : gelu ? "ldc == n and aux"
                            : "ldc == n"));
  const std::size_t values = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  switch (epilogue) {
    case GemmEpilogue::kNone:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      return;
    case GemmEpilogue::kBias:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      kernels<DenseKernels>().add_bias(c, vector, m, n);
      return;
    case GemmEpilogue::kBiasAdd:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      kernels<DenseKernels>().add_bias_and(c, vector, aux, m, n);
      return;
    case GemmEpilogue::kBiasGradA:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      // op(A) = Aᵀ: A is [k, m]. Under bf16 the GEMM read A's rounding, and
      // the bias gradient sums it too (A's fp32 values may not exist: the
      // bf16 MLP's hidden gradient).
      if (a.bf16 && caps().rounds_gemm_operands)
        kernels<DenseKernels>().bias_grad_bf16(a.bf16, vector, k, m);
      else
        kernels<DenseKernels>().bias_grad(a.data, vector, k, m);
      return;
    case GemmEpilogue::kBiasGeluTanh:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, aux, ldc);
      kernels<DenseKernels>().add_bias(aux, vector, m, n);
      kernels<ActivationKernels>().forward(Activation::kGeluTanh, aux, c, values);
      return;
    case GemmEpilogue::kGeluTanhGrad:
      gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      kernels<ActivationKernels>().backward(Activation::kGeluTanh, aux, nullptr, c, c, values);
      return;
  }
}

}  // namespace dptrain
