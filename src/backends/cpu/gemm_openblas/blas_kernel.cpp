// Implements: picking OpenBLAS's GEMM kernel from the CPU's instruction set
// (see blas_kernel.hpp).
//
// A DYNAMIC_ARCH OpenBLAS picks its kernel from a table of CPU model numbers
// when it is loaded. On a CPU newer than that table (Debian 12's 0.3.21 on
// Sapphire/Emerald Rapids, say) it falls back to the generic Prescott kernel,
// a quarter of the speed, and says nothing. It reads OPENBLAS_CORETYPE only
// at load time, which is before main(); so when its pick is below what the
// CPU supports, this sets the variable and re-executes the program, once,
// before MPI starts (MPI_Init has not run, so the launcher sees one process).
#include "backends/cpu/gemm_openblas/blas_kernel.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
}

namespace dptrain {
namespace {

// Set in the re-executed process: "<library's own pick>:<kernel asked for>".
constexpr const char* kMarker = "DPTRAIN_BLAS_LIBRARY_PICK";

const char* level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kSse: return "SSE";
    case SimdLevel::kAvx: return "AVX";
    case SimdLevel::kAvx2: return "AVX2";
    case SimdLevel::kAvx512: return "AVX-512";
    case SimdLevel::kAvx512Bf16: return "AVX512_BF16";
  }
  return "?";
}

std::string library_version() {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string_view config = openblas_get_config();
  const auto space = config.find(' ', config.find(' ') + 1);
  return std::string(config.substr(0, space));
}

// An empty variable counts as unset (OpenBLAS would read it as an unknown
// name and fall back to a kernel of its own choosing).
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool dynamic_arch() { return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr; }

// The marker, split; empty when this process was not re-executed by us.
struct Marker {
  std::string library_pick, requested;
};
Marker read_marker() {
  const char* m = env(kMarker);
  const char* forced = env("OPENBLAS_CORETYPE");
  if (!m || !forced) return {};
  std::string_view s(m);
  const auto colon = s.find(':');
  if (colon == std::string_view::npos || s.substr(colon + 1) != forced) return {};
  return {std::string(s.substr(0, colon)), std::string(s.substr(colon + 1))};
}

}  // namespace

SimdLevel cpu_simd_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // GCC's checks include the OS's XSAVE state for AVX and AVX-512 registers.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512cd");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return SimdLevel::kAvx512Bf16;
  if (avx512) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
  if (__builtin_cpu_supports("avx")) return SimdLevel::kAvx;
#endif
  return SimdLevel::kSse;
}

SimdLevel kernel_simd_level(const std::string& core) {
  static constexpr struct {
    const char* core;
    SimdLevel level;
  } kKernels[] = {
      {"Cooperlake", SimdLevel::kAvx512Bf16}, {"SapphireRapids", SimdLevel::kAvx512Bf16},
      {"SkylakeX", SimdLevel::kAvx512},       {"Haswell", SimdLevel::kAvx2},
      {"Zen", SimdLevel::kAvx2},              {"Excavator", SimdLevel::kAvx2},
      {"Sandybridge", SimdLevel::kAvx},       {"Bulldozer", SimdLevel::kAvx},
      {"Piledriver", SimdLevel::kAvx},        {"Steamroller", SimdLevel::kAvx},
  };
  for (const auto& k : kKernels)
    if (core == k.core) return k.level;
  return SimdLevel::kSse;
}

const char* kernel_for_level(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512Bf16: return "Cooperlake";
    case SimdLevel::kAvx512: return "SkylakeX";
    case SimdLevel::kAvx2: return "Haswell";
    default: return "";  // AVX-only kernels gain little; keep the library's pick
  }
}

void select_blas_kernel(char** argv) {
  if (!dynamic_arch() || env(kMarker)) return;   // fixed build, or already re-executed
  if (env("OPENBLAS_CORETYPE")) return;          // the user's choice
  const std::string core = openblas_get_corename();
  const SimdLevel cpu = cpu_simd_level();
  const char* better = kernel_for_level(cpu);
  if (kernel_simd_level(core) >= cpu || !*better) return;
  const std::string marker = core + ":" + better;
  setenv("OPENBLAS_CORETYPE", better, 1);
  setenv(kMarker, marker.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): go on with the library's pick; the summary says so.
  unsetenv("OPENBLAS_CORETYPE");
}

std::string blas_description() {
  const std::string core = openblas_get_corename();
  const SimdLevel cpu = cpu_simd_level();
  std::string s = library_version() + ", " + core + " kernel";
  const Marker marker = read_marker();
  if (!marker.requested.empty()) {
    s += " (chosen for this CPU's " + std::string(level_name(cpu)) + "; the library's own pick was " +
         marker.library_pick + ")";
  } else if (env("OPENBLAS_CORETYPE")) {
    s += " (set by OPENBLAS_CORETYPE)";
  }
  if (kernel_simd_level(core) < cpu && *kernel_for_level(cpu))
    s += "; WARNING: below this CPU's " + std::string(level_name(cpu)) +
         ", GEMMs run at a fraction of its speed";
  return s;
}

}  // namespace dptrain
