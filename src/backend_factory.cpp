// Implements: the backend factory, the one place that maps backend names to
// the implementations CMake built (src/none/ supplies the "not built" CUDA
// factory otherwise), and the transitional kind-based shims over it.
#include <string>

#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "dptrain/backend.hpp"
#include "dptrain/comm.hpp"
#include "dptrain/error.hpp"

namespace dptrain {
namespace {

struct BackendEntry {
  const char* name;
  std::unique_ptr<Backend> (*make)(const BackendOptions&);
  int (*visible_devices)();
};

int one_host() { return 1; }

// In the order --device lists them; a new backend is one more line here.
constexpr BackendEntry kBackends[] = {
    {"cpu", make_cpu_backend, one_host},
    {"cuda", make_cuda_backend, cuda_visible_devices},
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

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendEntry& e : kBackends) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts) {
  return entry(name).make(opts);
}

int visible_devices(const std::string& name) { return entry(name).visible_devices(); }

}  // namespace dptrain
