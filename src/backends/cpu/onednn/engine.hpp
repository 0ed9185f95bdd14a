// Implements: the one oneDNN CPU engine and stream of a process, and what
// oneDNN reports about this CPU (its instruction set, bf16 support).
// Primitives of the CPU backend (GEMMs, and convolution, pooling and
// normalization from the layers) are created on this engine once per shape
// and executed on this stream, which runs them on the calling thread's
// OpenMP team.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>

namespace dptrain::onednn {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

// "oneDNN 2.6.3", the version of the library loaded.
std::string version();

// The instruction set oneDNN's kernels use on this CPU ("AVX2",
// "AVX-512 BF16", "AVX-512 AMX", ...): dnnl_get_effective_cpu_isa, which
// follows ONEDNN_MAX_CPU_ISA when that is set.
std::string isa_name();

// "" when oneDNN runs bf16 GEMMs in hardware here (AVX512_BF16 or AMX);
// otherwise what is missing, for the --precision bf16 error.
std::string bf16_missing();

}  // namespace dptrain::onednn
