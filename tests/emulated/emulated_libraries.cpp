// Implements: what the emulated build of the CUDA backend gets in place of
// the libraries that are not this project's code and have no emulation:
// convolution and pooling plans (cuDNN) are the CPU backend's oneDNN plans,
// which work on the emulated device memory as on any host memory, and the
// communicator (NCCL) is the MPI one. Everything else of src/cuda/ — the
// backend core (cuda_backend.cpp: memory, copies, uploads, the cuBLAS GEMM
// mapping, markers), the kernel tables and the kernels — is the real code,
// compiled against the emulator's headers.
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

#include "comm/nccl_comm.hpp"
#include "cuda/kernel_tables.hpp"

namespace dptrain {
namespace cuda {
namespace {

class CpuSpatialKernels final : public SpatialKernels {
 public:
  CpuSpatialKernels() : cpu_(make_backend("cpu", BackendOptions{.threads = 1})) {}
  std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry& g) override {
    return cpu_->spatial().conv_plan(g);
  }
  std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) override {
    return cpu_->spatial().pool_plan(g);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace

std::unique_ptr<SpatialKernels> make_spatial_kernels(const Launch&, Precision) {
  return std::make_unique<CpuSpatialKernels>();
}

std::string spatial_library() { return "convolutions on the CPU backend (emulation)"; }

}  // namespace cuda

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm parent, cudaStream_t, int) {
  return make_mpi_communicator(parent);
}

}  // namespace dptrain
