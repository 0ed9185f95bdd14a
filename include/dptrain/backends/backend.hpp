// Implements: the compute interface of one device (docs/design.md section 1): a
// small core (memory and copies, host staging and uploads, a device clock,
// GEMM, capability queries) and one table of kernels per layer family,
// reached through one accessor each. Called per layer or per arena, never per
// element. Pointers passed to these functions are device pointers obtained
// from allocate() (host memory on the CPU backend). All matrices are row-major.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/comm/communicator.hpp"

namespace dptrain {

// The kernel families of one backend, one table each, made when the backend
// is made (every layer family finds its table at model build time).
struct KernelTables {
  std::unique_ptr<ActivationKernels> activations;
  std::unique_ptr<DenseKernels> dense;
  std::unique_ptr<LossKernels> losses;
  std::unique_ptr<OptimizerKernels> optimizers;
  std::unique_ptr<SpatialKernels> spatial;  // convolution and pooling plans
  std::unique_ptr<NormKernels> norm;        // bn
  std::unique_ptr<DropoutKernels> dropout;
  std::unique_ptr<AugmentKernels> augment;  // --augment crop and flip
  // embed, pos, ln, attn, seq, gap over positions; null on a backend that
  // has no sequence kernels yet (Backend::sequence then says so).
  std::unique_ptr<SequenceKernels> sequence = nullptr;
};

// --precision: fp32 everywhere; tf32 tensor-core GEMMs (fp32 storage); bf16
// GEMM inputs with fp32 accumulation, fp32 master weights, optimizer state
// and gradient reduction. The CPU backend supports fp32 only.
enum class Precision { kFp32, kTf32, kBf16 };
// --precision fp32, tf32 or bf16; Error(kUsage) for another name.
Precision parse_precision(const std::string& name);

struct BackendOptions {
  int threads = 1;       // CPU compute threads (BLAS)
  int device_index = 0;  // device ordinal (CUDA)
  Precision precision = Precision::kFp32;
};

// What callers may rely on, asked instead of which backend it is.
struct BackendCaps {
  // Shards must be staged in host memory (allocate_host) and uploaded
  // (upload_async); otherwise the scatter writes straight into backend memory.
  bool staged_uploads = false;
  // Phases are timed by device markers (mark / marker_ms); otherwise the
  // work is done when a call returns and host clocks are exact.
  bool device_clock = false;
  // Pointers from allocate() may be read and written by the host.
  bool host_addressable_memory = true;
};

class Backend {
 public:
  Backend() = default;
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;       // the factory's name: "cpu", "cuda"
  virtual std::string placement() const = 0;  // for the start-up summary: "cpu", "cuda:0"
  // The GEMM library, its version and kernel, for the start-up summary.
  virtual std::string gemm_library() const = 0;
  virtual BackendCaps caps() const = 0;

  // The collectives that work on this backend's memory, among the ranks of
  // world (duplicated, so their traffic never mixes with anything else on
  // it): MPI on host memory, NCCL on CUDA device memory. Collective over
  // world. The backend must outlive the communicator.
  virtual std::unique_ptr<Communicator> make_communicator(MPI_Comm world) = 0;

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
  // work is done when the call returns (caps().device_clock is false).
  static constexpr int kMarkers = 8;
  virtual void mark(int /*i*/) {}
  virtual double marker_ms(int /*from*/, int /*to*/) { return -1.0; }

  // C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major, with
  // op(X) = X or X^T; lda/ldb/ldc are row strides of the stored matrices.
  // k == 0 must yield C = beta * C.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;

  // `batch` GEMMs as above, the b-th on a + b·stride_a, b + b·stride_b and
  // c + b·stride_c (strides in floats): attention's products over N·H heads.
  // The default loops over gemm(); a backend overrides it with one batched call.
  virtual void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, std::size_t stride_a, const float* b,
                            int ldb, std::size_t stride_b, float beta, float* c, int ldc,
                            std::size_t stride_c, int batch) {
    for (int i = 0; i < batch; ++i) {
      const auto at = static_cast<std::size_t>(i);
      gemm(trans_a, trans_b, m, n, k, alpha, a + at * stride_a, lda, b + at * stride_b, ldb, beta,
           c + at * stride_c, ldc);
    }
  }

  // y += x, elementwise over n values (a residual block's sum of branches).
  virtual void add(const float* x, float* y, std::size_t n) = 0;

  // Number of NaN/Inf values in x (returned to the host).
  virtual std::size_t count_nonfinite(const float* x, std::size_t n) = 0;

  // What a step checks of its gradients g[0, n) before the update, returned
  // to the host together: the NaN/Inf count and, when `norm` (clipping),
  // OptimizerKernels::sum_squares(g, n), bit for bit (else 0). A backend
  // whose work runs behind the host (CUDA) waits for the device once.
  struct GradientCheck {
    std::size_t nonfinite = 0;
    double sum_squares = 0.0;
  };
  virtual GradientCheck check_gradients(const float* g, std::size_t n, bool norm) {
    return {count_nonfinite(g, n), norm ? optimizers().sum_squares(g, n) : 0.0};
  }

  // --- the kernel families, one table each (dptrain/backends/kernels/) ---
  ActivationKernels& activations() { return *kernels().activations; }
  DenseKernels& dense() { return *kernels().dense; }
  LossKernels& losses() { return *kernels().losses; }
  OptimizerKernels& optimizers() { return *kernels().optimizers; }
  SpatialKernels& spatial() { return *kernels().spatial; }
  NormKernels& norm() { return *kernels().norm; }
  DropoutKernels& dropout() { return *kernels().dropout; }
  AugmentKernels& augment() { return *kernels().augment; }
  // Error(kUsage) naming the backend where it has no sequence kernels.
  SequenceKernels& sequence();

 protected:
  // The implementation's tables: a member of it, so that they are destroyed
  // before the streams and handles it declared ahead of them.
  virtual KernelTables& kernels() = 0;

 public:
  // Bytes of device memory held in DeviceBuffers now (what the start-up
  // summary's memory line measures); raw allocate() calls are not counted.
  std::size_t buffer_bytes() const { return buffer_bytes_.load(); }
  void count_buffer(std::size_t bytes, bool allocated) noexcept {
    if (allocated) buffer_bytes_ += bytes;
    else buffer_bytes_ -= bytes;
  }

 private:
  static constexpr std::size_t kHostAlignment = 64;
  std::atomic<std::size_t> buffer_bytes_{0};
};

// --- the factory: the one place that maps names to implementations ---
// Every name make_backend knows, built into this binary or not, in the order
// --device lists them: "cpu", "cuda".
std::vector<std::string> backend_names();
// The backend called name: cpu always exists; cuda only when built with CUDA.
// Throws an exit-2 Error for an unknown name, a backend not built into this
// binary, or one that cannot run here (no usable GPU, a bad device index).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts);
// How many devices the named backend can run on from this process: 1 for
// cpu; the visible GPUs for cuda (0 when not built or none is visible).
// Never touches a device it is not asked to; exit-2 Error for an unknown name.
int visible_devices(const std::string& name);
// The device's UUID as nvidia-smi prints it ("GPU-xxxxxxxx-..."), so that
// ranks can tell whether two of them were given the same device; empty when
// the backend has no such id or the device cannot be queried.
std::string device_uuid(const std::string& name, int device);
// First thing in main(), before MPI starts: what a backend's libraries must
// do before anything else (an OpenBLAS build may re-execute the program with
// the kernel this CPU supports).
void prepare_backends(char** argv);


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
        count_(count) {
    if (kKind == MemoryKind::kDevice && ptr_) be.count_buffer(count * sizeof(T), true);
  }
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
      if constexpr (kKind == MemoryKind::kDevice) {
        be_->deallocate(ptr_);
        be_->count_buffer(count_ * sizeof(T), false);
      } else {
        be_->deallocate_host(ptr_);
      }
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
