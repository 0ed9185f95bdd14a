// Implements: the backend the GPU tests get in the emulated build — the CUDA
// backend's own kernel tables (src/cuda/*_kernels.cpp over the .cu kernels,
// compiled for the host emulation of device_emulator.hpp) on emulated
// device memory, with the CPU backend for what is not this project's kernel
// code: GEMMs (cuBLAS), convolution and pooling (cuDNN), the residual add
// and the communicator. This translation unit and the emulated CUDA sources
// are compiled with -Dcuda=cuda_emulated, so their tables live in
// dptrain::cuda_emulated and never meet the real ones of a CUDA build.
#include "emulated_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cuda/cuda_handles.hpp"
#include "cuda/error_cuda.hpp"
#include "cuda/kernel_tables.hpp"

namespace dptrain::cuda {
namespace {

// Few blocks by default, so that every grid-stride loop goes round several
// times; DPTRAIN_EMULATED_MAX_BLOCKS sets another cap (an H200's is
// 132 SMs x 8 = 1056), for grids as wide as a GPU's.
int emulated_max_blocks() {
  const char* v = std::getenv("DPTRAIN_EMULATED_MAX_BLOCKS");
  const int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : 7;
}

class EmulatedCudaBackend final : public Backend {
 public:
  explicit EmulatedCudaBackend(const BackendOptions& o)
      : cpu_(make_backend("cpu", BackendOptions{.threads = 1})),
        launch_{nullptr, emulated_max_blocks()},
        counter_(sizeof(unsigned long long)),
        activations_(make_activation_kernels(launch_)),
        dense_(make_dense_kernels(launch_)),
        losses_(make_loss_kernels(launch_)),
        optimizers_(make_optimizer_kernels(launch_)),
        norm_(make_norm_kernels(launch_)),
        dropout_(make_dropout_kernels(launch_)),
        augment_(make_augment_kernels(launch_)) {
    (void)o;  // one emulated device; the precision only reaches GEMMs and cuDNN
  }

  std::string name() const override { return "cuda-emulated"; }
  std::string placement() const override { return "cuda-emulated:0"; }
  std::string gemm_library() const override { return cpu_->gemm_library(); }
  BackendCaps caps() const override {
    return {.staged_uploads = false, .device_clock = false, .host_addressable_memory = true};
  }
  std::unique_ptr<Communicator> make_communicator(MPI_Comm world) override {
    return cpu_->make_communicator(world);
  }

  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    DPT_CUDA_CHECK(cudaMalloc(&p, bytes));
    DPT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes));
    return p;
  }
  void deallocate(void* p) noexcept override { cudaFree(p); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
  }
  void fill(float* x, float value, std::size_t n) override { cuda::fill(launch_, x, value, n); }
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    cpu_->gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void add(const float* x, float* y, std::size_t n) override { cpu_->add(x, y, n); }
  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    auto* counter = static_cast<unsigned long long*>(counter_.get());
    cuda::count_nonfinite(launch_, x, n, counter);
    unsigned long long host = 0;
    DPT_CUDA_CHECK(cudaMemcpyAsync(&host, counter, sizeof host, cudaMemcpyDeviceToHost));
    return static_cast<std::size_t>(host);
  }

  ActivationKernels& activations() override { return *activations_; }
  DenseKernels& dense() override { return *dense_; }
  LossKernels& losses() override { return *losses_; }
  OptimizerKernels& optimizers() override { return *optimizers_; }
  SpatialKernels& spatial() override { return cpu_->spatial(); }
  NormKernels& norm() override { return *norm_; }
  DropoutKernels& dropout() override { return *dropout_; }
  AugmentKernels& augment() override { return *augment_; }

 private:
  std::unique_ptr<Backend> cpu_;
  Launch launch_;
  DeviceMemory counter_;
  std::unique_ptr<ActivationKernels> activations_;
  std::unique_ptr<DenseKernels> dense_;
  std::unique_ptr<LossKernels> losses_;
  std::unique_ptr<OptimizerKernels> optimizers_;
  std::unique_ptr<NormKernels> norm_;
  std::unique_ptr<DropoutKernels> dropout_;
  std::unique_ptr<AugmentKernels> augment_;
};

}  // namespace
}  // namespace dptrain::cuda

namespace emulated {

std::unique_ptr<dptrain::Backend> make_emulated_cuda_backend(const dptrain::BackendOptions& o) {
  return std::make_unique<dptrain::cuda::EmulatedCudaBackend>(o);
}

}  // namespace emulated
