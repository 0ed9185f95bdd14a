// Implements: the backend factory, the one place that maps backend names to
// the implementations CMake built (none/ supplies the "not built" CUDA
// factory otherwise).
#include <string>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/cpu_gemm.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

struct BackendEntry {
  const char* name;
  std::unique_ptr<Backend> (*make)(const BackendOptions&);
  int (*visible_devices)();
  std::string (*device_uuid)(int device);
};

int one_host() { return 1; }
std::string no_uuid(int) { return {}; }

// In the order --device lists them; a new backend is one more line here.
constexpr BackendEntry kBackends[] = {
    {"cpu", make_cpu_backend, one_host, no_uuid},
    {"cuda", make_cuda_backend, cuda_visible_devices, cuda_device_uuid},
};

std::string known_list() {
  std::string list;
  for (const BackendEntry& e : kBackends) list += (list.empty() ? "" : ", ") + std::string(e.name);
  return list;
}

const BackendEntry& entry(const std::string& name) {
  for (const BackendEntry& e : kBackends)
    if (name == e.name) return e;
  throw Error(ExitCode::kUsage,
              "--device '" + name + "': no such backend (known: " + known_list() + ")");
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name != "bf16") throw_bad_choice("precision", name, "fp32, tf32, bf16");
  return Precision::kBf16;
}

AttentionImpl parse_attention(const std::string& name) {
  if (name == "auto") return AttentionImpl::kAuto;
  if (name == "math") return AttentionImpl::kMath;
  if (name == "fused") return AttentionImpl::kFused;
  if (name != "cudnn") throw_bad_choice("attention", name, "auto, math, fused, cudnn");
  return AttentionImpl::kCudnn;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendEntry& e : kBackends) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts) {
  return entry(name).make(opts);
}

int visible_devices(const std::string& name) { return entry(name).visible_devices(); }

std::string device_uuid(const std::string& name, int device) {
  return entry(name).device_uuid(device);
}

void prepare_backends(char** argv) { cpu_gemm::prepare(argv); }

}  // namespace dptrain
