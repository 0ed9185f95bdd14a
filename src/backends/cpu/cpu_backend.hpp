// Implements: the factory of the CPU reference backend (internal header; the
// factory by name, make_backend("cpu", ...), is what callers use).
#pragma once

#include <memory>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/backend_factory.hpp"

namespace dptrain {
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts);
}
