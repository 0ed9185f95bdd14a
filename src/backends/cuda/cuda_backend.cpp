// Implements: the core of the CUDA backend — device memory and copies on one
// non-blocking compute stream, input uploads from pinned memory on a copy
// stream ordered by per-slot events, device markers, the GEMMs (cuBLAS and
// cuBLASLt's epilogues: cuda_gemm.hpp), the NCCL communicator on its
// device, and the registry of its kernel families (kernel_factory.hpp), all
// launching on the compute stream. Semantics are
// those of the CPU reference (src/backends/cpu/), which the GPU tests check.
#include "backends/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <string>

#include "backends/cuda/cuda_gemm.hpp"
#include "backends/cuda/cuda_graph.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/nccl_comm.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
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
namespace cuda {
template <>
std::unique_ptr<ActivationKernels> make_kernels<ActivationKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<NormKernels> make_kernels<NormKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<DropoutKernels> make_kernels<DropoutKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<ConvertKernels> make_kernels<ConvertKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<AugmentKernels> make_kernels<AugmentKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<DenseKernels> make_kernels<DenseKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<LossKernels> make_kernels<LossKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<OptimizerKernels> make_kernels<OptimizerKernels>(const Launch& l, Precision p);
template <>
std::unique_ptr<SpatialKernels> make_kernels<SpatialKernels>(const Launch& l, Precision p);
// The table --attention asks for (cudnn/cudnn_attention_kernels.cpp, or
// no_cudnn/attention_kernels.cpp in a build without cuDNN): cuDNN's SDPA
// under bf16 for cudnn and auto, the fused kernels otherwise; null for math.
std::unique_ptr<FusedAttentionKernels> make_attention_kernels(const Launch& l, Precision p,
                                                              AttentionImpl impl, Backend& be);
template <>
std::unique_ptr<SequenceKernels> make_kernels<SequenceKernels>(const Launch& l, Precision p);
}  // namespace cuda

namespace {

// cudaMalloc aligns to 256 bytes anyway; a zero-byte request still gets a
// real pointer so that deallocate and DeviceBuffer never special-case it.
constexpr std::size_t kMinAllocation = 256;
constexpr int kBlocksPerSm = 8;  // grid-stride kernels: a few waves, no more

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& opts)
      : device_(opts.device_index), precision_(opts.precision) {
    DPT_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = cuda::Stream::create();
    int sms = 0;
    DPT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    launch_ = {stream_.get(), std::max(1, sms) * kBlocksPerSm};
    gemms_ = std::make_unique<cuda::Gemms>(stream_.get(), launch_, precision_);
    cudaDeviceProp prop{};
    DPT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    // The kernel families of this backend, one line each (kernel_factory.hpp).
    add_family<ActivationKernels>();
    add_family<NormKernels>();
    add_family<DropoutKernels>();
    add_family<ConvertKernels>();
    add_family<AugmentKernels>();
    add_family<DenseKernels>();
    add_family<LossKernels>();
    add_family<OptimizerKernels>();
    add_family<SpatialKernels>();  // on cuDNN, in the backend's precision
    add_family<SequenceKernels>();
    // --attention's table: none for math (cudnn/ or no_cudnn/attention_kernels).
    if (auto attention = cuda::make_attention_kernels(launch_, precision_, opts.attention, *this))
      kernels_.add(std::move(attention));
    // The non-finite count, the sum of squares, then its max_blocks partials.
    check_ = cuda::DeviceMemory(static_cast<std::size_t>(launch_.max_blocks + 2) * sizeof(double));
    host_check_ = cuda::PinnedMemory(2 * sizeof(double));
    // Everything the upload path needs exists before the first step. Each
    // event is recorded once here, so that every wait has a defined target.
    copy_ = cuda::Stream::create();
    for (int s = 0; s < kUploadSlots; ++s) {
      released_[s] = cuda::Event::create();
      uploaded_[s] = cuda::Event::create();
      DPT_CUDA_CHECK(cudaEventRecord(released_[s].get(), stream_.get()));
      DPT_CUDA_CHECK(cudaEventRecord(uploaded_[s].get(), copy_.get()));
    }
    for (cuda::Event& m : markers_) {
      m = cuda::Event::create_timed();
      DPT_CUDA_CHECK(cudaEventRecord(m.get(), stream_.get()));
    }
  }
  ~CudaBackend() override {
    // Members free memory next; nothing queued may still be using it.
    if (stream_.get()) cudaStreamSynchronize(stream_.get());
    if (copy_.get()) cudaStreamSynchronize(copy_.get());
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string placement() const override { return "cuda:" + std::to_string(device_); }
  std::string gemm_library() const override {
    return gemms_->version() + ", " + cuda::spatial_library();
  }
  std::string device_name() const override { return device_name_; }
  // Device memory is not the host's; the host only queues work, so shards
  // are staged and uploaded, and phases are timed by events.
  BackendCaps caps() const override {
    return {.staged_uploads = true, .device_clock = true, .host_addressable_memory = false,
            .fused_gemm_epilogues = true,
            .rounds_gemm_operands = precision_ == Precision::kBf16};
  }
  // NCCL orders its collectives after and before this backend's compute
  // stream, on this backend's device.
  std::unique_ptr<Communicator> make_communicator(const MpiCommHandle& world) override {
    return make_nccl_communicator(world.comm, stream_.get(), device_);
  }

  void* allocate(std::size_t bytes) override {
    const std::size_t size = std::max(bytes, kMinAllocation);
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, size);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(ExitCode::kOther, "GPU " + std::to_string(device_) + " is out of memory: " +
                                        std::to_string(bytes) + " bytes requested, " +
                                        std::to_string(free_b >> 20) + " of " +
                                        std::to_string(total_b >> 20) + " MiB free");
    }
    DPT_CUDA_CHECK(rc);
    // On our stream, not the legacy one, which a non-blocking stream does
    // not wait for: later work on the stream sees the zeros.
    const cudaError_t set = cudaMemsetAsync(p, 0, size, stream_.get());
    if (set != cudaSuccess) {
      cudaFree(p);
      DPT_CUDA_CHECK(set);
    }
    return p;
  }

  void deallocate(void* p) noexcept override {
    if (!p) return;
    // Kernels queued on the stream may still read p, uploads write it.
    cudaStreamSynchronize(stream_.get());
    cudaStreamSynchronize(copy_.get());
    cudaFree(p);
  }

  void* allocate_host(std::size_t bytes) override {
    void* p = nullptr;
    DPT_CUDA_CHECK(cudaHostAlloc(&p, std::max(bytes, kMinAllocation), cudaHostAllocDefault));
    return p;
  }

  void deallocate_host(void* p) noexcept override {
    if (!p) return;
    cudaStreamSynchronize(copy_.get());  // an upload may still read p
    cudaFreeHost(p);
  }

  // The copy stream never waits for the compute stream as a whole, only
  // for the slot's release: the upload of batch t+1 runs under step t.
  void release_slot(int slot) override {
    DPT_CUDA_CHECK(cudaEventRecord(released_[index(slot)].get(), stream_.get()));
  }

  void upload_async(int slot, void* dst, const void* src, std::size_t bytes) override {
    const std::size_t s = index(slot);
    if (!bytes) return;
    DPT_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), released_[s].get(), 0));
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_.get()));
    DPT_CUDA_CHECK(cudaEventRecord(uploaded_[s].get(), copy_.get()));
  }

  void wait_upload(int slot) override {
    DPT_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), uploaded_[index(slot)].get(), 0));
  }

  void mark(int i) override {
    DPT_CUDA_CHECK(cudaEventRecord(marker(i), stream_.get()));
  }
  double marker_ms(int from, int to) override {
    DPT_CUDA_CHECK(cudaEventSynchronize(marker(to)));
    float ms = 0.0f;
    DPT_CUDA_CHECK(cudaEventElapsedTime(&ms, marker(from), marker(to)));
    return ms;
  }

  void sync_upload(int slot) override {
    DPT_CUDA_CHECK(cudaEventSynchronize(uploaded_[index(slot)].get()));
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
    // The caller may reuse src at once (the CPU backend's memcpy contract).
    DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
    DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes || dst == src) return;
    const auto* s = static_cast<const char*>(src);
    const auto* d = static_cast<const char*>(dst);
    if (d < s + bytes && s < d + bytes) {
      // cudaMemcpy is undefined for overlap; the CPU backend's memmove is
      // not, so bounce through a temporary (rare: never on the step path).
      cuda::DeviceMemory tmp(bytes);
      DPT_CUDA_CHECK(cudaMemcpyAsync(tmp.get(), src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
      DPT_CUDA_CHECK(cudaMemcpyAsync(dst, tmp.get(), bytes, cudaMemcpyDeviceToDevice, stream_.get()));
      DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
      return;
    }
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
  }

  void fill(float* x, float value, std::size_t n) override { cuda::fill(launch_, x, value, n); }

  void synchronize() override { DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

  std::unique_ptr<RecordedWork> record(const std::function<void()>& work,
                                       std::string* why) override {
    return cuda::record_graph(stream_.get(), work, why);
  }

  // The GEMMs are cuda_gemm.cpp's; the epilogues fall back to the
  // Backend's defaults (a GEMM and the kernels) where cuBLASLt has no
  // algorithm.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand a, int lda,
            GemmOperand b, int ldb, float beta, float* c, int ldc) override {
    gemms_->gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, std::size_t stride_a, const float* b, int ldb, std::size_t stride_b,
                    float beta, float* c, int ldc, std::size_t stride_c, int batch) override {
    gemms_->gemm_batched(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                         beta, c, ldc, stride_c, batch);
  }
  void gemm_epilogue(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a, int lda,
                     GemmOperand b, int ldb, float* c, int ldc, GemmEpilogue epilogue,
                     float* vector, float* aux) override {
    if (!gemms_->gemm_epilogue(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, epilogue,
                               vector, aux))
      Backend::gemm_epilogue(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, epilogue, vector,
                             aux);
  }
  void gemm_epilogue_bf16(GemmEpilogue epilogue, bool trans_a, bool trans_b, int m, int n, int k,
                          GemmOperand a, int lda, GemmOperand b, int ldb, std::uint16_t* c16,
                          int ldc, std::uint16_t* aux16, const float* vector,
                          const std::uint16_t* vector16, float* scratch, float* scratch2,
                          int scratch_rows) override {
    if (!gemms_->gemm_epilogue_bf16(epilogue, trans_a, trans_b, m, n, k, a, lda, b, ldb, c16, ldc,
                                    aux16, vector16))
      Backend::gemm_epilogue_bf16(epilogue, trans_a, trans_b, m, n, k, a, lda, b, ldb, c16, ldc,
                                  aux16, vector, vector16, scratch, scratch2, scratch_rows);
  }
  void add(const float* x, float* y, std::size_t n) override { gemms_->add(x, y, n); }

  using Backend::sum;
  void sum(const float* a, const float* b, float* y, std::size_t n, std::uint16_t* y16) override {
    cuda::sum(launch_, a, b, y, n, y16);
  }

  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    return check_gradients(x, n, false).nonfinite;
  }

  // The count and the sum of squares (cuda::sum_squares as the optimizer
  // table runs it: the same partials count, so the same bits) land side by
  // side in device memory and come back in one copy and one wait.
  GradientCheck check_gradients(const float* g, std::size_t n, bool norm) override {
    auto* counter = static_cast<unsigned long long*>(check_.get());
    auto* sum = static_cast<double*>(check_.get()) + 1;
    cuda::count_nonfinite(launch_, g, n, counter);
    if (norm) cuda::sum_squares(launch_, g, n, sum + 1, sum);
    const std::size_t bytes = norm ? 2 * sizeof(double) : sizeof(double);
    DPT_CUDA_CHECK(cudaMemcpyAsync(host_check_.get(), check_.get(), bytes, cudaMemcpyDeviceToHost,
                                   stream_.get()));
    DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    GradientCheck c;
    c.nonfinite = static_cast<std::size_t>(*static_cast<unsigned long long*>(host_check_.get()));
    if (norm) c.sum_squares = static_cast<double*>(host_check_.get())[1];
    return c;
  }

 protected:
  KernelRegistry& kernel_registry() override { return kernels_; }

 private:
  template <typename Family>
  void add_family() {
    kernels_.add(cuda::make_kernels<Family>(launch_, precision_));
  }

  static std::size_t index(int slot) {
    if (slot < 0 || slot >= kUploadSlots)
      throw Error(ExitCode::kOther, "upload slot " + std::to_string(slot) + " out of range [0, " +
                                        std::to_string(kUploadSlots) + ")");
    return static_cast<std::size_t>(slot);
  }

  int device_;
  Precision precision_;
  std::string device_name_;  // cudaDeviceProp::name
  cuda::Stream stream_;
  cuda::Launch launch_;
  std::unique_ptr<cuda::Gemms> gemms_;  // destroyed before the stream it runs on
  KernelRegistry kernels_;  // destroyed before the stream and handles they use
  cuda::DeviceMemory check_;       // check_gradients' results and scratch
  cuda::PinnedMemory host_check_;
  cuda::Stream copy_;  // host-to-device uploads of the input
  std::array<cuda::Event, kUploadSlots> released_, uploaded_;
  std::array<cuda::Event, kMarkers> markers_;
  cudaEvent_t marker(int i) const {
    if (i < 0 || i >= kMarkers)
      throw Error(ExitCode::kOther, "device marker " + std::to_string(i) + " out of range");
    return markers_[static_cast<std::size_t>(i)].get();
  }  // phase boundaries of a step
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) throw Error(ExitCode::kUsage, "--device cuda: no usable GPU is visible (" + why + ")");
  if (opts.device_index < 0 || opts.device_index >= n)
    throw Error(ExitCode::kUsage, "--device cuda: GPU " + std::to_string(opts.device_index) +
                                      " requested but only " + std::to_string(n) +
                                      " are visible");
  return std::make_unique<CudaBackend>(opts);
}

}  // namespace dptrain
