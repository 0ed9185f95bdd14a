// Implements: a layer's bf16 copy of a tensor its backward multiplies twice
// (a dense product's dy: once in the weight gradient, once in the input
// gradient), made once per pass where the backend's GEMMs would otherwise
// round it in each call (BackendCaps::rounds_gemm_operands: CUDA under
// --precision bf16). The copy is a per-pass slot of the activation arena,
// reserved by the layer in allocate(); elsewhere the operand is the fp32
// tensor alone and nothing is reserved. Rounding is the GEMM's own (round
// to nearest even), so the products and their bits are those of before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/model/activation_arena.hpp"

namespace dptrain {

class RoundedOperand {
 public:
  RoundedOperand() = default;  // off: operands are the fp32 tensors
  explicit RoundedOperand(ArenaBuffer<std::uint16_t> slot) : slot_(std::move(slot)), on_(true) {}

  // Whether a layer should reserve a slot on this backend.
  static bool wanted(Backend& be) { return be.caps().rounds_gemm_operands; }

  // The operand for x[0, n), rounded into the slot now, for this GEMM and
  // the next take() of the same x.
  GemmOperand round(Backend& be, const float* x, std::size_t n) {
    if (!on_) return x;
    be.kernels<ConvertKernels>().to_bf16(x, slot_.get(), n);
    of_ = x;
    return {x, slot_.get()};
  }
  // The operand for x with the copy round() made of it, if the last round()
  // was of x and nothing took it since; x alone otherwise. The copy is
  // given out once: the caller guarantees x was not written in between
  // (the same pass's dy, passed from backward_params to backward_input).
  GemmOperand take(const float* x) {
    const bool rounded = on_ && of_ == x;
    of_ = nullptr;
    return rounded ? GemmOperand{x, slot_.get()} : GemmOperand{x};
  }

 private:
  ArenaBuffer<std::uint16_t> slot_;
  bool on_ = false;
  const float* of_ = nullptr;  // what the slot holds, until taken
};

}  // namespace dptrain
