// Implements: a layer's bf16 copy of a tensor its backward multiplies twice
// (a dense product's dy: once in the weight gradient, once in the input
// gradient), made once per pass where the backend's GEMMs would otherwise
// round it in each call (BackendCaps::rounds_gemm_operands: CUDA under
// --precision bf16). The copy is a per-pass slot of the activation arena,
// reserved by the layer in allocate(); elsewhere the operand is the fp32
// tensor alone and nothing is reserved. Rounding is the GEMM's own (round
// to nearest even), so the products and their bits are those of before.
// A producer that writes the copy itself in the pass that makes the tensor
// (the loss's gradient; the fused attention's output and dqkv) writes it
// into the slot, and no rounding pass runs. A parameter's copy is read
// from the model's bf16 twin of the parameter arena instead (ParamOperand).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/activation_arena.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

class RoundedOperand {
 public:
  RoundedOperand() = default;  // off: operands are the fp32 tensors
  explicit RoundedOperand(ArenaBuffer<std::uint16_t> slot) : slot_(std::move(slot)), on_(true) {}

  // Whether a layer should reserve a slot on this backend.
  static bool wanted(Backend& be) { return be.caps().rounds_gemm_operands; }
  // The bytes of a slot for a parameter of n values, whatever the rows
  // (ParamOperand's per-pass slot).
  static RowBytes weight_bytes(std::size_t n) {
    return [n](int) { return n * sizeof(std::uint16_t); };
  }

  // The operand for x[0, n), rounded into the slot now, for this GEMM and
  // the next take() of the same x.
  GemmOperand round(Backend& be, const float* x, std::size_t n) {
    if (!on_) return x;
    be.kernels<ConvertKernels>().to_bf16(x, slot_.get(), n);
    hold(x, slot_.get());
    return {x, copy_};
  }
  // The same for a view whose producer already wrote its rounding (x.bf16:
  // into this slot, or into a buffer of its own that outlives this layer's
  // backward): no pass of its own, and the copy read is the producer's.
  GemmOperand round(Backend& be, ConstTensorView x, std::size_t n) {
    if (!on_ || !x.bf16) return round(be, x.data, n);
    hold(x.data, x.bf16);
    return {x.data, copy_};
  }
  // Where a kernel that makes x writes its rounding in the same pass, in
  // place of round(): the slot, now held for x as round() holds it (then
  // read through held() and take()), or nullptr when off.
  std::uint16_t* slot_for(const float* x) {
    if (!on_) return nullptr;
    hold(x, slot_.get());
    return slot_.get();
  }
  bool on() const { return on_; }
  // The operand for x, as take(), where the caller's fp32 x may no longer
  // hold its values (the layer said its backward does not read x,
  // Layer::backward_reads_input): the copy must be there. Error(kOther)
  // where it is not (a backward without its forward).
  GemmOperand take_kept(const float* x) {
    if (on_ && of_ != x)
      throw Error(ExitCode::kOther, "a layer's backward ran without the bf16 copy of its input");
    return take(x);
  }
  // The slot, whatever it holds (nullptr when off).
  std::uint16_t* slot() const { return on_ ? slot_.get() : nullptr; }
  // The operand for x with the copy the slot holds for it, not given out.
  GemmOperand held(const float* x) const {
    return on_ && of_ == x ? GemmOperand{x, copy_} : GemmOperand{x};
  }
  // The operand for x with the copy round() made of it, if the last round()
  // was of x and nothing took it since; x alone otherwise. The copy is
  // given out once: the caller guarantees x was not written in between
  // (the same pass's dy, passed from backward_params to backward_input).
  GemmOperand take(const float* x) {
    const bool rounded = on_ && of_ == x;
    of_ = nullptr;
    return rounded ? GemmOperand{x, copy_} : GemmOperand{x};
  }

 private:
  void hold(const float* x, const std::uint16_t* copy) {
    of_ = x;
    copy_ = copy;
  }

  ArenaBuffer<std::uint16_t> slot_;
  bool on_ = false;
  const float* of_ = nullptr;             // whose copy is held, until taken
  const std::uint16_t* copy_ = nullptr;  // where: the slot, or the producer's buffer
};

// A parameter tensor (a weight, a bias) as the GEMMs and their epilogues
// read it where the backend rounds operands: its copy in the model's bf16
// twin of the parameter arena (ParamsBf16: rounded once after each change
// of the parameters, by the optimizer's pass where it can), else rounded
// into a per-pass slot of the layer's own in each pass that reads it
// (--shard-params, whose weights are gathered again for backward: a slot
// kept from forward would hold a bf16 copy of every weight of the model on
// every rank). Off elsewhere: the fp32 tensor alone.
class ParamOperand {
 public:
  ParamOperand() = default;
  // The parameter at arena offset `offset`, of n values, of a layer bound
  // to `arenas`: the twin's copy where they have one and it starts on 16
  // bytes (as the slots do: tensor-core kernels and cuDNN read 16 bytes at
  // a time), else a per-pass slot (Layer::reserve_bytes' for max_rows);
  // nothing where the backend does not round.
  ParamOperand(Backend& be, const ArenaPointers& arenas, int max_rows, std::size_t offset,
               std::size_t n) {
    if (!RoundedOperand::wanted(be)) return;
    if (arenas.params_bf16 && offset % kTwinAlignValues == 0) {
      twin_ = arenas.params_bf16;
      offset_ = offset;
      return;
    }
    own_ = RoundedOperand(reserve_in<std::uint16_t>(arenas, be, max_rows,
                                                    RoundedOperand::weight_bytes(n),
                                                    Lifetime::kPass));
  }

  // The operand for the parameter p (n values, the one at the offset
  // above) in this pass: the twin's copy, or p rounded into the slot now.
  GemmOperand operand(Backend& be, const float* p, std::size_t n) {
    return twin_ ? GemmOperand{p, twin_->data + offset_} : own_.round(be, p, n);
  }

 private:
  // bf16 values in 16 bytes (the twin itself starts on 256).
  static constexpr std::size_t kTwinAlignValues = 16 / sizeof(std::uint16_t);

  const ParamsBf16* twin_ = nullptr;
  std::size_t offset_ = 0;
  RoundedOperand own_;
};

}  // namespace dptrain
