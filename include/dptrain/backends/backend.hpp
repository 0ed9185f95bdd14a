// Implements: the compute interface of one device (docs/design.md section 1): a
// small core (memory and copies, host staging and uploads, a device clock,
// GEMM, capability queries) and its kernel families, one table each, found
// by type (kernels<Family>()). Called per layer or per arena, never per
// element. Pointers passed to these functions are device pointers obtained
// from allocate() (host memory on the CPU backend). All matrices are
// row-major. Made by dptrain/backends/backend_factory.hpp; owning buffers are
// dptrain/backends/backend_buffer.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>

#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

class Communicator;    // dptrain/comm/communicator.hpp
struct MpiCommHandle;  // an MPI_Comm, defined there too

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
  // gemm_epilogue runs the epilogue inside the GEMM's own kernel (else it
  // is the GEMM and the dense family's kernels, one after the other).
  bool fused_gemm_epilogues = false;
  // Under --precision bf16 the GEMMs round their operands to bf16 on the
  // device, a pass over each operand per call, and read a GemmOperand's
  // `bf16` copy instead where the caller has one: a layer that multiplies
  // the same tensor twice (dy, in a weight gradient and an input gradient)
  // rounds it once (ConvertKernels::to_bf16) and hands both GEMMs the copy.
  bool rounds_gemm_operands = false;
};

// A GEMM operand: its fp32 values and, optionally, their rounding to bf16
// (ConvertKernels::to_bf16 over the same span, same layout), which a
// backend that rounds its operands (caps().rounds_gemm_operands) reads
// instead of rounding `data` again; every other backend reads `data`. The
// caller keeps the two equal. A plain pointer converts to one without a
// copy, so calls that have none read as before.
struct GemmOperand {
  GemmOperand(const float* values) : data(values) {}  // NOLINT(google-explicit-constructor)
  GemmOperand(const float* values, const std::uint16_t* rounded) : data(values), bf16(rounded) {}
  const float* data;
  const std::uint16_t* bf16 = nullptr;
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
  // The device's model as its driver names it ("NVIDIA H200"), for the
  // start-up summary and the table of dense peaks behind `mfu`; empty
  // where the backend names none.
  virtual std::string device_name() const { return {}; }
  virtual BackendCaps caps() const = 0;

  // The collectives that work on this backend's memory, among the ranks of
  // world (duplicated, so their traffic never mixes with anything else on
  // it): MPI on host memory, NCCL on CUDA device memory. Collective over
  // world. The backend must outlive the communicator.
  // world wraps an MPI_Comm (dptrain/comm/communicator.hpp), so that this
  // header needs no MPI.
  virtual std::unique_ptr<Communicator> make_communicator(const MpiCommHandle& world) = 0;

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

  // --- recorded work (CUDA graphs; --cuda-graphs) ---
  // Work recorded once and replayed as one launch: every kernel and library
  // call it queued, with the pointers and values it was queued with. What
  // a call reads from device memory it reads at replay.
  class RecordedWork {
   public:
    virtual ~RecordedWork() = default;
    // Queues all of it again, after the work queued so far.
    virtual void replay() = 0;
  };
  // Records what `work` queues, running none of it. Null where the backend
  // cannot record (the CPU runs each call as it is made) or the recording
  // failed (inside `work`, a call that waits for the device, allocates or
  // throws): `why` then says why, and nothing of `work` ran or stays queued.
  virtual std::unique_ptr<RecordedWork> record(const std::function<void()>& work,
                                               std::string* why);

  // C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major, with
  // op(X) = X or X^T; lda/ldb/ldc are row strides of the stored matrices.
  // k == 0 must yield C = beta * C.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    GemmOperand a, int lda, GemmOperand b, int ldb, float beta, float* c,
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

  // A GEMM with beta 0 and an epilogue over its product, one call, so that
  // a backend whose library fuses them (cuBLASLt on CUDA) never makes a
  // pass of its own over C or A; row-major as gemm(), P = op(A) op(B):
  //   kBias:       c[i, j] = P[i, j] + vector[j]           (a dense layer's forward)
  //   kBiasAdd:    c[i, j] = P[i, j] + vector[j] + aux[i, j] (the forward of a
  //                block's last part, aux the block's identity shortcut, read
  //                only; c may not alias aux)
  //   kBiasGradA:  c = P and vector[i] = sum_l op(A)[i, l]  (its weight gradient:
  //                op(A) = dyᵀ, so vector is the bias gradient; overwritten)
  //   kBiasGeluTanh: aux = P + vector[j], c = gelu:tanh(aux) (a dense layer's
  //                forward with the gelu:tanh after it: aux is its output,
  //                which the activation's backward reads, c the activation's)
  //   kGeluTanhGrad: c = P ∘ gelu:tanh'(aux)             (the input gradient of
  //                the dense layer after a gelu:tanh, carried through it:
  //                aux is the activation's input; vector unused)
  // aux [m, n] has row stride ldc, as c. The default is gemm() and the
  // dense and activation families' kernels (add_bias, bias_grad, the
  // activation's forward, and its backward over c in place; kBiasAdd's
  // add_bias_and: (P + vector) + aux, the bits of the bias pass and then a
  // block's sum), which need ldc == n (kBias, kBiasAdd and the gelu ones)
  // and trans_a with lda == m (kBiasGradA), as the dense layer has them;
  // Error(kOther) otherwise. Where the library fuses kBiasAdd (cuBLASLt:
  // beta 1 with aux as C), its order of the two additions is the library's.
  // kNone: c = P (for gemm_epilogue_bf16's bf16 product; vector unused).
  // k == 0 gives P = 0.
  enum class GemmEpilogue { kBias, kBiasGradA, kBiasGeluTanh, kGeluTanhGrad, kBiasAdd, kNone };
  virtual void gemm_epilogue(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a,
                             int lda, GemmOperand b, int ldb, float* c, int ldc,
                             GemmEpilogue epilogue, float* vector, float* aux = nullptr);

  // A GEMM's output written only as bf16 (ldc its row stride), under bf16
  // on a backend that rounds GEMM operands:
  //   kNone:         c16 = bf16(P) (attention's output gradient, which its
  //                  kernels read in bf16 alone)
  //   kBias:         c16 = bf16(P + bias) (the head's logits, which
  //                  nothing reads in fp32 under bf16)
  //   kBiasGeluTanh: t = P + bias, aux16 = bf16(t), c16 = bf16(gelu:tanh(t))
  //                  (the bf16 MLP: what autocast keeps in bf16)
  //   kGeluTanhGrad: c16 = bf16(P ∘ gelu:tanh'(aux16))
  // Where the library fuses it (cuBLASLt), bias is vector16, the bias's
  // rounding, as its bf16 epilogues take it. The default, and the fallback
  // where the library has no algorithm, is gemm_epilogue's fp32 fold with
  // the fp32 vector into scratch (c) and scratch2 (aux), ldc == n, then the
  // roundings (kGeluTanhGrad expands aux16 into scratch2 first). scratch
  // and scratch2 hold [m, n]; for kBias and kNone scratch may hold only
  // scratch_rows rows (0: m), and the fold runs in chunks of that many rows.
  virtual void gemm_epilogue_bf16(GemmEpilogue epilogue, bool trans_a, bool trans_b, int m, int n,
                                  int k, GemmOperand a, int lda, GemmOperand b, int ldb,
                                  std::uint16_t* c16, int ldc, std::uint16_t* aux16,
                                  const float* vector, const std::uint16_t* vector16,
                                  float* scratch, float* scratch2, int scratch_rows = 0);

  // y += x, elementwise over n values.
  virtual void add(const float* x, float* y, std::size_t n) = 0;
  // y = a + b, elementwise over n values, in one pass (a residual block's
  // sum of branches, and of their gradients); y may be a or b. y16, where
  // not null, also receives y rounded to bf16 (ConvertKernels::to_bf16's
  // bits): the gradient the next block's GEMMs read under bf16. The default
  // is a copy and add(), the same sums, then the rounding.
  virtual void sum(const float* a, const float* b, float* y, std::size_t n, std::uint16_t* y16);
  void sum(const float* a, const float* b, float* y, std::size_t n) { sum(a, b, y, n, nullptr); }

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
  virtual GradientCheck check_gradients(const float* g, std::size_t n, bool norm);

  // --- the kernel families (dptrain/backends/kernels/), one table each ---
  // The backend's table of Family, e.g. be.kernels<NormKernels>(): O(1), so
  // that a call site may ask per call. Error(kUsage) naming the backend
  // where it has none (Family::kMissing, or "<kName> kernels").
  template <typename Family>
  Family& kernels() {
    if (Family* table = kernel_registry().template find<Family>()) return *table;
    throw_missing_family(missing_text<Family>());
  }
  // The backend's table of Family, or null where it has none (a family
  // that options may leave out, as --attention does FusedAttentionKernels).
  template <typename Family>
  Family* find_kernels() {
    return kernel_registry().template find<Family>();
  }

 protected:
  // The implementation's registry: a member of it, declared after the
  // streams and handles the tables use, so that the tables go first.
  virtual KernelRegistry& kernel_registry() = 0;

 public:
  // Bytes of device memory held in DeviceBuffers now (what the start-up
  // summary's memory line measures); raw allocate() calls are not counted.
  std::size_t buffer_bytes() const { return buffer_bytes_.load(); }
  // The most bytes held in DeviceBuffers at once so far (the summary
  // event's peak_device on a backend with device memory of its own).
  std::size_t peak_buffer_bytes() const { return peak_buffer_bytes_.load(); }
  void count_buffer(std::size_t bytes, bool allocated) noexcept {
    if (!allocated) {
      buffer_bytes_ -= bytes;
      return;
    }
    const std::size_t now = buffer_bytes_ += bytes;
    std::size_t peak = peak_buffer_bytes_.load();
    while (now > peak && !peak_buffer_bytes_.compare_exchange_weak(peak, now)) {
    }
  }

 private:
  template <typename Family>
  static std::string missing_text() {
    if constexpr (requires { Family::kMissing; }) return Family::kMissing;
    else return std::string(Family::kName) + " kernels";
  }
  // Error(kUsage): "the <name()> backend has no <what>".
  [[noreturn]] void throw_missing_family(const std::string& what) const;

  static constexpr std::size_t kHostAlignment = 64;
  std::atomic<std::size_t> buffer_bytes_{0}, peak_buffer_bytes_{0};
};

}  // namespace dptrain
