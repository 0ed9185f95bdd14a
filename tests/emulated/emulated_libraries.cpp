// Implements: what the emulated build of the CUDA backend gets in place of
// cuDNN, the one library used by src/cuda/ that has no emulation here: its
// convolution and pooling plans are the CPU backend's oneDNN plans, which
// work on the emulated device memory as on any host memory, each pass
// queued on the compute stream as cuDNN's would be. Everything else of
// src/cuda/ and src/comm/nccl_comm.cpp — the backend core (memory, copies,
// uploads, the cuBLAS GEMM mapping, markers), the kernel tables, the
// kernels and the NCCL communicator — is the real code, compiled against the
// emulator's headers (cuBLAS and NCCL emulated in include/).
//
// The link: the emulated objects define what dptrain_core's CUDA objects
// (or, in a build without CUDA, src/none/cuda_none.cpp) define —
// make_cuda_backend, cuda_visible_devices, cuda_device_uuid,
// make_nccl_communicator — and come before the library on the link line,
// so the linker never takes those members from it, and make_backend("cuda")
// makes the emulated backend. dptrain::cuda is dptrain::cuda_emulated here
// (-Dcuda=cuda_emulated), so the kernel tables never meet the real ones.
#include <memory>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/kernel_tables.hpp"

namespace dptrain {
namespace cuda {
namespace {

// A CPU plan's pass as cuDNN's would be: queued on the compute stream, run
// when the stream gets to it, on the device memory as it is then.
class QueuedConvPlan final : public ConvPlan {
 public:
  QueuedConvPlan(std::unique_ptr<ConvPlan> plan, cudaStream_t s) : plan_(std::move(plan)), s_(s) {}
  ~QueuedConvPlan() override { dptrain_emu::run_stream(s_); }
  void forward(const float* x, const float* w, const float* b, float* y, int rows) override {
    dptrain_emu::enqueue(s_, [p = plan_.get(), x, w, b, y, rows] { p->forward(x, w, b, y, rows); });
  }
  void backward_data(const float* dy, const float* w, float* dx, int rows) override {
    dptrain_emu::enqueue(s_, [p = plan_.get(), dy, w, dx, rows] { p->backward_data(dy, w, dx, rows); });
  }
  void backward_weights(const float* x, const float* dy, float* dw, float* db, int rows) override {
    dptrain_emu::enqueue(s_, [p = plan_.get(), x, dy, dw, db, rows] {
      p->backward_weights(x, dy, dw, db, rows);
    });
  }
  std::size_t objects_created() const override {
    dptrain_emu::run_stream(s_);
    return plan_->objects_created();
  }

 private:
  std::unique_ptr<ConvPlan> plan_;
  cudaStream_t s_;
};

class QueuedPoolPlan final : public PoolPlan {
 public:
  QueuedPoolPlan(std::unique_ptr<PoolPlan> plan, cudaStream_t s) : plan_(std::move(plan)), s_(s) {}
  ~QueuedPoolPlan() override { dptrain_emu::run_stream(s_); }
  void forward(const float* x, float* y, int rows) override {
    dptrain_emu::enqueue(s_, [p = plan_.get(), x, y, rows] { p->forward(x, y, rows); });
  }
  void backward(const float* dy, float* dx, int rows) override {
    dptrain_emu::enqueue(s_, [p = plan_.get(), dy, dx, rows] { p->backward(dy, dx, rows); });
  }
  std::size_t objects_created() const override {
    dptrain_emu::run_stream(s_);
    return plan_->objects_created();
  }

 private:
  std::unique_ptr<PoolPlan> plan_;
  cudaStream_t s_;
};

class CpuSpatialKernels final : public SpatialKernels {
 public:
  explicit CpuSpatialKernels(cudaStream_t s)
      : cpu_(make_backend("cpu", BackendOptions{.threads = 1})), s_(s) {}
  std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry& g) override {
    return std::make_unique<QueuedConvPlan>(cpu_->spatial().conv_plan(g), s_);
  }
  std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) override {
    return std::make_unique<QueuedPoolPlan>(cpu_->spatial().pool_plan(g), s_);
  }

 private:
  std::unique_ptr<Backend> cpu_;
  cudaStream_t s_;
};

}  // namespace

std::unique_ptr<SpatialKernels> make_spatial_kernels(const Launch& launch, Precision) {
  return std::make_unique<CpuSpatialKernels>(launch.stream);
}

std::string spatial_library() { return "convolutions on the CPU backend (emulation)"; }

}  // namespace cuda
}  // namespace dptrain
