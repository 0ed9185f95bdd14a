// Implements: the CPU reference backend — OpenBLAS GEMM plus plain loops for
// the elementwise, loss and optimizer kernels. The CUDA backend is tested
// against this one, so it favours exactness over speed where they conflict.
#include "cpu/cpu_backend.hpp"

#include "cpu/blas_kernel.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "dptrain/error.hpp"

// Declared here too because the reference cblas.h (picked up on some
// systems instead of OpenBLAS's) lacks it; an identical redeclaration is fine.
extern "C" void openblas_set_num_threads(int num_threads);

namespace dptrain {
namespace {

constexpr std::size_t kAlignment = 64;  // one cache line, and AVX-512 friendly
constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
constexpr float kInvSqrt2Pi =
    static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64, and
// the best one the CPU has is picked when the program loads (GCC function
// multiversioning), so one portable binary runs at the speed of the node.
// Every clone computes bitwise the same: no FMA contraction (-ffp-contract=off),
// and these loops add elementwise, never re-associating a sum.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DPT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DPT_VECTOR_CLONES
#endif

DPT_VECTOR_CLONES
void add_bias_rows(float* __restrict y, const float* __restrict bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = y + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

DPT_VECTOR_CLONES
void sum_rows(const float* __restrict dy, float* __restrict db, int rows, int cols) {
  std::fill_n(db, cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* __restrict row = dy + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) db[c] += row[c];
  }
}

DPT_VECTOR_CLONES
void relu_forward(const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

DPT_VECTOR_CLONES
void relu_backward(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                   std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// torch.optim.Adam / AdamW (amsgrad off) over one arena.
DPT_VECTOR_CLONES
void adam_loop(float* __restrict w, const float* __restrict g, float* __restrict m,
               float* __restrict v, std::size_t n, float lr, float b1, float b2, float eps,
               float inv_bc1, float inv_bc2, float l2, float shrink) {
  for (std::size_t i = 0; i < n; ++i) {
    const float wi = w[i] * shrink;
    const float gi = g[i] + l2 * w[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - lr * (mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps);
  }
}

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

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opts) {
    if (opts.precision != Precision::kFp32)
      throw Error(ExitCode::kUsage,
                  std::string("--precision ") +
                      (opts.precision == Precision::kTf32 ? "tf32" : "bf16") +
                      " needs --device cuda (the CPU backend computes in fp32 only)");
    openblas_set_num_threads(std::max(1, opts.threads));
  }

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "cpu"; }
  std::string gemm_library() const override { return blas_description(); }

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

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
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
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void add_bias(float* y, const float* bias, int rows, int cols) override {
    add_bias_rows(y, bias, rows, cols);
  }

  void bias_grad(const float* dy, float* db, int rows, int cols) override {
    sum_rows(dy, db, rows, cols);
  }

  void activation_forward(Activation f, const float* x, float* y, std::size_t n) override {
    switch (f) {
      case Activation::kRelu:
        relu_forward(x, y, n);
        break;
      case Activation::kTanh:
        for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
        break;
      case Activation::kGelu:
        // Exact erf form: torch.nn.GELU() default, not the tanh approximation.
        for (std::size_t i = 0; i < n; ++i)
          y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
        break;
      case Activation::kSigmoid:
        for (std::size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
        break;
    }
  }

  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           std::size_t n) override {
    switch (f) {
      case Activation::kRelu:
        relu_backward(x, dy, dx, n);
        break;
      case Activation::kTanh:
        for (std::size_t i = 0; i < n; ++i) dx[i] = (1.0f - y[i] * y[i]) * dy[i];
        break;
      case Activation::kGelu:
        for (std::size_t i = 0; i < n; ++i) {
          const float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
          const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
          dx[i] = (cdf + x[i] * pdf) * dy[i];
        }
        break;
      case Activation::kSigmoid:
        for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] * (1.0f - y[i]) * dy[i];
        break;
    }
  }

  // dlogits may be null (evaluation needs only the stats).
  void softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                    float grad_scale, float* dlogits, float* stats) override {
    double loss_sum = 0.0;
    std::size_t correct = 0;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<std::size_t>(r) * cols;
      int arg = 0;
      for (int c = 1; c < cols; ++c)
        if (z[c] > z[arg]) arg = c;
      const float zmax = z[arg];
      double sum = 0.0;
      for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
      const int label = labels[r];
      loss_sum += std::log(sum) - static_cast<double>(z[label] - zmax);
      if (arg == label) ++correct;
      if (dlogits) {
        float* d = dlogits + static_cast<std::size_t>(r) * cols;
        const double inv_sum = 1.0 / sum;
        for (int c = 0; c < cols; ++c)
          d[c] =
              grad_scale * static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) * inv_sum);
        d[label] -= grad_scale;
      }
    }
    stats[0] += static_cast<float>(loss_sum);
    stats[1] += static_cast<float>(correct);
  }

  // dpred may be null (evaluation needs only the stats).
  void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
           float* dpred, float* stats) override {
    double loss_sum = 0.0;
    const float g = cols > 0 ? grad_scale * 2.0f / static_cast<float>(cols) : 0.0f;
    for (int r = 0; r < rows; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * cols;
      double row_sum = 0.0;
      for (int c = 0; c < cols; ++c) {
        const float diff = pred[base + c] - target[base + c];
        row_sum += static_cast<double>(diff) * diff;
        if (dpred) dpred[base + c] = g * diff;
      }
      if (cols > 0) loss_sum += row_sum / cols;
    }
    stats[0] += static_cast<float>(loss_sum);
  }

  // torch.optim.SGD with dampening 0.
  void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                const SgdParams& p) override {
    const float lr = p.lr, mu = p.momentum, wd = p.weight_decay;
    if (mu > 0.0f) {
      for (std::size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * w[i];
        const float v = mu * velocity[i] + gi;
        velocity[i] = v;
        w[i] -= lr * (p.nesterov ? gi + mu * v : v);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    }
  }

  // torch.optim.Adam / AdamW (amsgrad off).
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamParams& p) override {
    const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
    const double t = static_cast<double>(std::max<std::int64_t>(1, p.step));
    // Bias corrections in double: 1 - 0.999^t loses most of its digits in
    // float for small t.
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
    const float l2 = p.decoupled ? 0.0f : p.weight_decay;
    const float shrink = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;
    adam_loop(w, g, m, v, n, p.lr, b1, b2, eps, inv_bc1, inv_bc2, l2, shrink);
  }

  void scale(float* x, float alpha, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
  }

  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    return nonfinite_count(x, n);
  }

 private:
  // aligned_alloc needs a size that is a multiple of the alignment, and a
  // zero-byte request must still give a pointer that deallocate accepts.
  static std::size_t rounded(std::size_t bytes) {
    return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts) {
  return std::make_unique<CpuBackend>(opts);
}

}  // namespace dptrain
