// Implements: the CUDA fused attention table (FusedAttentionKernels) over the
// launchers of fused_attention.cu and fused_attention_backward.cu, on the
// compute stream: on the tensor cores with bf16 operands under --precision
// bf16 and TF32 ones under tf32 (as cuBLAS runs the projections' GEMMs), fp32
// fused multiply-adds under fp32. The backend makes it only where --attention
// allows it (cuda_backend.cpp).
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/fused_attention.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cuda {
namespace {

class CudaFusedAttention final : public FusedAttentionKernels {
 public:
  CudaFusedAttention(const Launch& l, Precision p, bool requested)
      : launch_(l),
        operands_(p == Precision::kBf16   ? AttentionOperands::kBf16
                  : p == Precision::kTf32 ? AttentionOperands::kTf32
                                          : AttentionOperands::kFp32),
        requested_(requested) {}

  std::string unsupported(int head_dim) const override {
    const int most = fused_attention_max_head_dim(operands_);
    if (head_dim >= 1 && head_dim <= most) return "";
    return "fused attention takes head dimensions up to " + std::to_string(most) + ", not " +
           std::to_string(head_dim);
  }
  bool requested() const override { return requested_; }
  bool reads_qkv_bf16() const override { return bf16(); }

  // Under bf16 a qkv copy is read where given (the operands are its bits).
  void forward(GemmOperand qkv, const HeadShape& s, float scale, bool causal, float* o,
               float* lse, std::uint16_t* o_bf16) override {
    require_output(o, o_bf16, "o");
    fused_attention_forward(launch_, operands_, qkv.data, bf16() ? qkv.bf16 : nullptr, s, scale,
                            causal, o, lse, o_bf16);
  }
  // Σ do ∘ o is summed from the fp32 o where there is one, else from o_bf16;
  // under bf16 from do's copy where given (the operands are its bits).
  void backward(GemmOperand qkv, const float* o, const float* lse, GemmOperand d_o,
                const HeadShape& s, float scale, bool causal, float* rowdot, float* dqkv,
                const std::uint16_t* o_bf16, std::uint16_t* dqkv_bf16) override {
    require_output(o, o_bf16, "o");
    require_output(d_o.data, d_o.bf16, "do");
    require_output(dqkv, dqkv_bf16, "dqkv");
    fused_attention_backward(launch_, operands_, qkv.data, bf16() ? qkv.bf16 : nullptr, o, o_bf16,
                             lse, d_o.data, bf16() ? d_o.bf16 : nullptr, s, scale, causal, rowdot,
                             dqkv, dqkv_bf16);
  }

 private:
  // A tensor given in fp32, or in bf16 alone under bf16.
  void require_output(const void* fp32, const void* copy, const char* what) const {
    DPT_REQUIRE(fp32 || (copy && bf16()), ExitCode::kOther,
                std::string("fused attention: ") + what +
                    " needs its fp32 values (its bf16 copy alone only under --precision bf16)");
  }

  bool bf16() const { return operands_ == AttentionOperands::kBf16; }

  Launch launch_;
  AttentionOperands operands_;
  bool requested_;
};

}  // namespace

std::unique_ptr<FusedAttentionKernels> make_fused_attention(const Launch& l, Precision p,
                                                            bool requested) {
  return std::make_unique<CudaFusedAttention>(l, p, requested);
}

}  // namespace dptrain::cuda
