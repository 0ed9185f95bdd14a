// Implements: the process's oneDNN engine and stream, and the CPU facts
// oneDNN reports (see engine.hpp).
#include "backends/cpu/onednn/engine.hpp"

namespace dptrain::onednn {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

namespace {

bool has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t level) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(level)) ==
         static_cast<unsigned>(level);
}

}  // namespace

std::string isa_name() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  // Strongest first: every level's bits include the ones below it.
  if (has(isa, dnnl_cpu_isa_avx512_core_amx)) return "AVX-512 AMX";
  if (has(isa, dnnl_cpu_isa_avx512_core_bf16)) return "AVX-512 BF16";
  if (has(isa, dnnl_cpu_isa_avx512_core_vnni)) return "AVX-512 VNNI";
  if (has(isa, dnnl_cpu_isa_avx512_core)) return "AVX-512";
  if (has(isa, dnnl_cpu_isa_avx2_vnni)) return "AVX2 VNNI";
  if (has(isa, dnnl_cpu_isa_avx2)) return "AVX2";
  if (has(isa, dnnl_cpu_isa_avx)) return "AVX";
  if (has(isa, dnnl_cpu_isa_sse41)) return "SSE4.1";
  return "no JIT (reference kernels)";
}

std::string bf16_missing() {
  if (has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16)) return "";
  return "this CPU has no bf16 instructions (AVX512_BF16 or AMX; oneDNN reports " + isa_name() +
         ")";
}

}  // namespace dptrain::onednn
