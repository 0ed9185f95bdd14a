// Implements: the backend factory's interface (docs/design.md section 1),
// the one place that maps names to implementations: the names --device
// knows, the options a backend is made with (threads, device, --precision),
// device discovery, and what must run before MPI starts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend.hpp"

namespace dptrain {

// --precision: fp32 everywhere; tf32 tensor-core GEMMs (fp32 storage); bf16
// GEMM inputs with fp32 accumulation, fp32 master weights, optimizer state
// and gradient reduction. The CPU backend supports fp32 only.
enum class Precision { kFp32, kTf32, kBf16 };
// --precision fp32, tf32 or bf16; Error(kUsage) for another name.
Precision parse_precision(const std::string& name);

// --attention: auto (fused on cuda, math on cpu), math (the T x T weights
// materialized: the reference), fused (FusedAttentionKernels), cudnn
// (cuDNN's fused attention: not in this build yet).
enum class AttentionImpl { kAuto, kMath, kFused, kCudnn };
// --attention auto, math, fused or cudnn; Error(kUsage) for another name.
AttentionImpl parse_attention(const std::string& name);

struct BackendOptions {
  int threads = 1;       // CPU compute threads (BLAS)
  int device_index = 0;  // device ordinal (CUDA)
  Precision precision = Precision::kFp32;
  // A backend that cannot run the one asked for by name throws Error(kUsage).
  AttentionImpl attention = AttentionImpl::kAuto;
};

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

}  // namespace dptrain
