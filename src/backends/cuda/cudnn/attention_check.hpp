// Implements: the arithmetic of the cuDNN attention table's first-use check
// (cudnn_attention_kernels.cpp, internal to src/backends/cuda/cudnn/): the
// bounds cuDNN's results must keep to against the fused kernels', the gap
// between two tensors, a tensor's values read back from fp32 or from its
// bf16 copy, and the words of the note that says a pass was replaced.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"

namespace dptrain::cuda {

// The bounds, relative to the largest |value| of the fused kernels' tensor
// (tests/gpu/test_cudnn_attention.cpp derives them).
constexpr double kOutputBound = 1e-2, kLseBound = 1e-4, kGradientBound = 3e-2;

// max |got - want| / max |want| (with a floor of 1e-30 under the latter);
// NaN where got has a non-finite value or the gap is not a number.
inline double relative_gap(const std::vector<float>& got, const std::vector<float>& want) {
  double gap = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) return std::nan("");
    gap = std::max(gap, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return gap / scale;
}

// n values of a tensor in be's memory: its fp32 values where p is not null,
// else its bf16 copy's, widened.
inline std::vector<float> device_values(Backend& be, const float* p, const std::uint16_t* copy,
                                        std::size_t n) {
  std::vector<float> host(n);
  if (p) {
    be.copy_to_host(host.data(), p, n * sizeof(float));
    return host;
  }
  std::vector<std::uint16_t> bits(n);
  be.copy_to_host(bits.data(), copy, n * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < n; ++i) host[i] = bf16_value(bits[i]);
  return host;
}

// "0.0123"
inline std::string gap_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

inline std::string differs(const char* pass, const std::string& gaps) {
  return std::string("its ") + pass + " differs from the fused kernels' by " + gaps +
         " of their largest values, past bf16's bounds";
}

}  // namespace dptrain::cuda
