// Implements: the core of the CPU reference backend — host memory that is
// backend memory at once (so staging and uploads reduce to memcpy), the
// GEMM (oneDNN or OpenBLAS, cpu_gemm.hpp; bf16 inputs on oneDNN where the CPU
// has bf16 instructions), the NaN/Inf count, and the registry of the kernel
// families of this folder.
// The CUDA backend is tested against this one, so it favours exactness over
// speed where they conflict.
#include "backends/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_gemm.hpp"
#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/onednn/batched_gemm.hpp"
#include "backends/cpu/onednn/bf16_gemm.hpp"
#include "backends/cpu/onednn/engine.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

// The families registered below, each specialized in its own file (the
// standard wants a specialization declared before its first use).
template <>
std::unique_ptr<ActivationKernels> make_cpu_kernels<ActivationKernels>();
template <>
std::unique_ptr<DenseKernels> make_cpu_kernels<DenseKernels>();
template <>
std::unique_ptr<LossKernels> make_cpu_kernels<LossKernels>();
template <>
std::unique_ptr<OptimizerKernels> make_cpu_kernels<OptimizerKernels>();
template <>
std::unique_ptr<SpatialKernels> make_cpu_kernels<SpatialKernels>();
template <>
std::unique_ptr<NormKernels> make_cpu_kernels<NormKernels>();
template <>
std::unique_ptr<DropoutKernels> make_cpu_kernels<DropoutKernels>();
template <>
std::unique_ptr<ConvertKernels> make_cpu_kernels<ConvertKernels>();
template <>
std::unique_ptr<AugmentKernels> make_cpu_kernels<AugmentKernels>();
template <>
std::unique_ptr<SequenceKernels> make_cpu_kernels<SequenceKernels>();

namespace {

constexpr std::size_t kAlignment = 64;  // one cache line, and AVX-512 friendly

// NaN and Inf are the floats whose exponent bits are all ones.
DPT_VECTOR_CLONES
std::size_t nonfinite_count(const float* __restrict x, std::size_t n) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    bad += (bits & 0x7f800000u) == 0x7f800000u ? 1 : 0;
  }
  return bad;
}

DPT_VECTOR_CLONES
void add_to(const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opts) {
    // The kernel families of this backend, one line each (kernel_factory.hpp).
    add_family<ActivationKernels>();
    add_family<DenseKernels>();
    add_family<LossKernels>();
    add_family<OptimizerKernels>();
    add_family<SpatialKernels>();  // on oneDNN primitives
    add_family<NormKernels>();
    add_family<DropoutKernels>();
    add_family<ConvertKernels>();
    add_family<AugmentKernels>();
    add_family<SequenceKernels>();
    if (opts.attention == AttentionImpl::kFused || opts.attention == AttentionImpl::kCudnn) {
      const char* which = opts.attention == AttentionImpl::kFused ? "fused" : "cudnn";
      throw Error(ExitCode::kUsage, std::string("--attention ") + which +
                                        " needs --device cuda; the cpu backend computes attention "
                                        "as math");
    }
    if (opts.precision == Precision::kTf32)
      throw Error(ExitCode::kUsage, "--precision tf32 needs --device cuda (TF32 is a GPU format)");
    if (opts.precision == Precision::kBf16) {
      const std::string missing = onednn::bf16_missing();
      if (!missing.empty())
        throw Error(ExitCode::kUsage, "--precision bf16 on --device cpu: " + missing +
                                          "; use --precision fp32, or --device cuda");
      bf16_ = std::make_unique<onednn::Bf16Gemm>();
    }
    batched_ = std::make_unique<onednn::BatchedGemm>(opts.precision == Precision::kBf16);
    // Every compute thread of this rank: oneDNN's OpenMP team (GEMMs,
    // convolutions) and the GEMM library's own pool where it has one. Set
    // explicitly, so ranks sharing a node do not each start a thread per core.
    omp_set_num_threads(std::max(1, opts.threads));
    cpu_gemm::set_threads(std::max(1, opts.threads));
  }

  std::string name() const override { return "cpu"; }
  std::string placement() const override { return "cpu"; }
  // The library, its kernels, and the OpenMP team this thread's calls get.
  std::string gemm_library() const override {
    const std::string team = ", " + std::to_string(omp_get_max_threads()) + " OpenMP thread(s)";
    if (bf16_)
      return onednn::version() + " matmul, bf16 inputs, fp32 accumulation, " +
             onednn::isa_name() + " kernels" + team;
    return cpu_gemm::describe() + team;
  }
  // Everything is done when a call returns, in memory the host can touch:
  // no staging, and host clocks time the phases exactly.
  BackendCaps caps() const override {
    return {.staged_uploads = false, .device_clock = false, .host_addressable_memory = true};
  }
  std::unique_ptr<Communicator> make_communicator(const MpiCommHandle& world) override {
    return make_mpi_communicator(world.comm);
  }

  void* allocate(std::size_t bytes) override {
    void* p = allocate_host(bytes);
    std::memset(p, 0, rounded(bytes));
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }

  // Backend memory is host memory already: staging is the same allocation
  // (uninitialised), and an upload is a plain copy, complete on return, so
  // the slot calls (release_slot, wait_upload, sync_upload) stay no-ops.
  void* allocate_host(std::size_t bytes) override {
    void* p = std::aligned_alloc(kAlignment, rounded(bytes));
    if (!p)
      throw Error(ExitCode::kOther,
                  "host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void deallocate_host(void* p) noexcept override { std::free(p); }
  void upload_async(int /*slot*/, void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void fill(float* x, float value, std::size_t n) override { std::fill_n(x, n, value); }
  void synchronize() override {}

  // The CPU rounds bf16 operands inside its GEMM (onednn/): a caller's
  // rounded copy is not read.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand op_a,
            int lda, GemmOperand op_b, int ldb, float beta, float* c, int ldc) override {
    const float* a = op_a.data;
    const float* b = op_b.data;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
      // BLAS may reject k == 0 or skip the beta scaling; an empty shard
      // relies on this giving exact zeros (beta == 0 must not read C).
      for (int i = 0; i < m; ++i) {
        float* row = c + static_cast<std::size_t>(i) * ldc;
        if (beta == 0.0f)
          std::fill_n(row, n, 0.0f);
        else
          for (int j = 0; j < n; ++j) row[j] *= beta;
      }
      return;
    }
    if (bf16_)
      bf16_->run(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
      cpu_gemm::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, std::size_t stride_a, const float* b, int ldb, std::size_t stride_b,
                    float beta, float* c, int ldc, std::size_t stride_c, int batch) override {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    if (k <= 0) {  // as gemm: beta C, never reading C when beta == 0
      for (int i = 0; i < batch; ++i)
        gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta,
             c + static_cast<std::size_t>(i) * stride_c, ldc);
      return;
    }
    batched_->run(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                  ldc, stride_c, batch);
  }

  void add(const float* x, float* y, std::size_t n) override { add_to(x, y, n); }
  using Backend::sum;
  void sum(const float* a, const float* b, float* y, std::size_t n, std::uint16_t* y16) override {
    for (std::size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];  // y may be a or b
    if (y16)  // never asked for in training: the CPU's GEMMs round inside
      for (std::size_t i = 0; i < n; ++i) y16[i] = bf16_bits(y[i]);
  }

  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    return nonfinite_count(x, n);
  }


 protected:
  KernelRegistry& kernel_registry() override { return kernels_; }

 private:
  template <typename Family>
  void add_family() {
    kernels_.add(make_cpu_kernels<Family>());
  }

  // aligned_alloc needs a size that is a multiple of the alignment, and a
  // zero-byte request must still give a pointer that deallocate accepts.
  static std::size_t rounded(std::size_t bytes) {
    return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }

  KernelRegistry kernels_;
  std::unique_ptr<onednn::Bf16Gemm> bf16_;  // --precision bf16 only
  std::unique_ptr<onednn::BatchedGemm> batched_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts) {
  return std::make_unique<CpuBackend>(opts);
}

}  // namespace dptrain
