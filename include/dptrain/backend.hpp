// Implements: the compute interface of one device (DESIGN.md section 1).
// Called per layer or per arena, never per element. Pointers passed to these
// functions are device pointers obtained from allocate() (host memory on the
// CPU backend). All matrices are row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace dptrain {

enum class DeviceKind { kCpu, kCuda };
enum class Activation { kRelu, kTanh, kGelu, kSigmoid };

struct SgdParams {
  float lr = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // L2: g += wd * w
};

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // false: Adam (L2 into g); true: AdamW (w -= lr*wd*w)
  std::int64_t step = 1;   // 1-based step count, for bias correction
};

// --precision: fp32 everywhere; tf32 tensor-core GEMMs (fp32 storage); bf16
// GEMM inputs with fp32 accumulation, fp32 master weights, optimizer state
// and gradient reduction. The CPU backend supports fp32 only.
enum class Precision { kFp32, kTf32, kBf16 };

struct BackendOptions {
  int threads = 1;       // CPU compute threads (BLAS)
  int device_index = 0;  // CUDA device ordinal
  Precision precision = Precision::kFp32;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu" or "cuda"
  // The GEMM library, its version and kernel, for the start-up summary.
  virtual std::string gemm_library() const = 0;

  // --- memory (bytes) ---
  virtual void* allocate(std::size_t bytes) = 0;  // zero-filled
  virtual void deallocate(void* p) noexcept = 0;
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill(float* x, float value, std::size_t n) = 0;
  virtual void synchronize() = 0;

  // --- host staging and asynchronous uploads ---
  // Host memory for data on its way to the device: page-locked on CUDA (the
  // copy engine reads it directly, which is what lets an upload run while
  // the host goes on), aligned memory elsewhere. Uninitialised, never null.
  virtual void* allocate_host(std::size_t bytes) {
    return ::operator new(bytes ? bytes : 1, std::align_val_t{kHostAlignment});
  }
  virtual void deallocate_host(void* p) noexcept {
    ::operator delete(p, std::align_val_t{kHostAlignment});
  }

  // Uploads that overlap compute, one slot per input buffer (double
  // buffering needs two). On CUDA the copies run on a copy stream, ordered
  // by events, and none of these calls blocks the host except sync_upload:
  //   release_slot(s): on the compute stream, after the work queued so far:
  //     the slot's destinations are no longer read (or written) by it.
  //   upload_async(s, dst, src, n): copies n bytes host -> device after the
  //     last release_slot(s), never overtaking the kernels queued before it.
  //     src stays untouched until sync_upload(s) returns.
  //   wait_upload(s): compute work queued from now on sees the slot's copies.
  //   sync_upload(s): blocks the host until the slot's copies have read
  //     their sources (normally long done), so src may be rewritten.
  // Slots only order: two buffers sharing one stay correct, they merely
  // serialise more. Elsewhere the copy is synchronous and the rest no-ops.
  static constexpr int kUploadSlots = 2;
  virtual void release_slot(int /*slot*/) {}
  virtual void upload_async(int /*slot*/, void* dst, const void* src, std::size_t bytes) {
    copy_to_device(dst, src, bytes);
  }
  virtual void wait_upload(int /*slot*/) {}
  virtual void sync_upload(int /*slot*/) {}

  // --- device clock, for per-phase times of a step ---
  // mark(i) records marker i (0 <= i < kMarkers) after the work queued so
  // far; marker_ms(i, j) is the device time from marker i to j once both
  // completed (it waits for j), or a negative value on a backend whose
  // work is done when the call returns (CPU: host clocks are exact there).
  static constexpr int kMarkers = 8;
  virtual void mark(int /*i*/) {}
  virtual double marker_ms(int /*from*/, int /*to*/) { return -1.0; }

  // C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major, with
  // op(X) = X or X^T; lda/ldb/ldc are row strides of the stored matrices.
  // k == 0 must yield C = beta * C.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;

  // y[r, c] += bias[c] for r < rows.
  virtual void add_bias(float* y, const float* bias, int rows, int cols) = 0;
  // db[c] = sum_r dy[r, c]  (overwrites db; rows == 0 gives zeros).
  virtual void bias_grad(const float* dy, float* db, int rows, int cols) = 0;

  // y = f(x), elementwise over n values.
  virtual void activation_forward(Activation f, const float* x, float* y, std::size_t n) = 0;
  // dx = f'(x) * dy; x is the input and y the output of the forward pass.
  virtual void activation_backward(Activation f, const float* x, const float* y,
                                   const float* dy, float* dx, std::size_t n) = 0;

  // Softmax cross-entropy over rows of logits[rows, cols] with class labels.
  // dlogits = grad_scale * (softmax - onehot). stats[0] += sum of per-sample
  // losses, stats[1] += number of rows whose argmax equals the label.
  // Numerically stable (max subtracted). Labels are already range-checked.
  virtual void softmax_xent(const float* logits, const std::int32_t* labels, int rows,
                            int cols, float grad_scale, float* dlogits, float* stats) = 0;
  // Mean squared error; per-sample loss = mean over cols of (pred - target)^2.
  // dpred = grad_scale * 2 * (pred - target) / cols. stats[0] += loss sum;
  // stats[1] is left unchanged.
  virtual void mse(const float* pred, const float* target, int rows, int cols, float grad_scale,
                   float* dpred, float* stats) = 0;

  // One fused update over a whole parameter arena.
  virtual void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                        const SgdParams& p) = 0;
  virtual void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                         const AdamParams& p) = 0;

  // x *= alpha.
  virtual void scale(float* x, float alpha, std::size_t n) = 0;
  // Number of NaN/Inf values in x (returned to the host).
  virtual std::size_t count_nonfinite(const float* x, std::size_t n) = 0;

 private:
  static constexpr std::size_t kHostAlignment = 64;
};

// The factory: cpu always exists; cuda only when built with CUDA (throws an
// exit-2 Error otherwise, or when no GPU is usable).
std::unique_ptr<Backend> make_backend(DeviceKind kind, const BackendOptions& opts);
bool cuda_compiled();
int cuda_device_count();  // 0 when not compiled or no GPU is visible

// Where a BackendBuffer lives: device memory (Backend::allocate) or host
// staging memory (Backend::allocate_host, pinned on CUDA).
enum class MemoryKind { kDevice, kHost };

// Owning buffer of T, allocated through a Backend. Non-copyable; a move
// leaves the source empty.
template <typename T, MemoryKind kKind>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, std::size_t count)
      : be_(&be), ptr_(static_cast<T*>(count ? allocate(be, count * sizeof(T)) : nullptr)),
        count_(count) {}
  ~BackendBuffer() { reset(); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer(BackendBuffer&& o) noexcept
      : be_(std::exchange(o.be_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = std::exchange(o.be_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  void reset() noexcept {
    if (ptr_ && be_) {
      if constexpr (kKind == MemoryKind::kDevice) be_->deallocate(ptr_);
      else be_->deallocate_host(ptr_);
    }
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }

 private:
  static void* allocate(Backend& be, std::size_t bytes) {
    if constexpr (kKind == MemoryKind::kDevice) return be.allocate(bytes);
    else return be.allocate_host(bytes);
  }

  Backend* be_ = nullptr;
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

template <typename T>
using DeviceBuffer = BackendBuffer<T, MemoryKind::kDevice>;
template <typename T>
using HostBuffer = BackendBuffer<T, MemoryKind::kHost>;

}  // namespace dptrain
