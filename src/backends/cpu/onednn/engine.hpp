// Implements: the one oneDNN CPU engine and stream of a process, and what
// oneDNN reports about this CPU (its instruction set, bf16 support).
// Primitives of the CPU backend (GEMMs, and convolution, pooling and
// normalization from the layers) are created on this engine once per shape
// and executed on this stream, which runs them on the calling thread's
// OpenMP team.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <vector>

namespace dptrain::onednn {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

// Runs p on the process's stream with arguments prepared when p was made
// (their memories' handles set since): the C++ execute also builds a map
// and a vector per call; oneDNN 2.6's own execute still takes a few small
// mallocs for its argument map (measured: 4 to 6 per call, against 9 to 11
// through the C++ API).
inline void execute(const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), cpu_stream().get(),
                                                 static_cast<int>(args.size()), args.data()),
                          "could not execute a oneDNN primitive");
}

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
