// Implements: the loss of --loss: its name, and the call that adds
// a shard's loss to the running sums and writes the output gradient.
#pragma once

#include <cstdint>
#include <string>

#include "dptrain/backends/backend.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/shard.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

enum class LossKind { kXent, kMse };

LossKind parse_loss(const std::string& name);  // Error(kUsage) on a bad name
const char* loss_name(LossKind loss);
// Class ids travel as one int32 per row (xent); targets as floats (mse).
inline bool class_labels(LossKind loss) { return loss == LossKind::kXent; }
// The labels a set must hold for this loss.
inline LabelType label_type(LossKind loss) {
  return class_labels(loss) ? LabelType::kClass : LabelType::kTarget;
}

// Adds the shard's loss to stats[0] (and correct count to stats[1]) and writes
// grad_scale * dLoss/dout into dout, and its bf16 rounding into dout_bf16
// where that is not null (Model::output_grad_bf16). An empty shard adds
// nothing. `output` is the model's per-sample output shape: on a sequence
// [T, C] xent runs over every position (T labels per sample, a token set's
// targets), so the sums count positions, not samples.
// out_bf16, where not null, is the output in bf16 only (Model::output_bf16;
// xent alone): the loss reads it in place of out and, where dout is not
// null, writes the gradient over it in bf16 (out, dout and dout_bf16 are
// then not touched).
void apply_loss(Backend& be, LossKind loss, const float* out, const Shard& shard,
                const Shape& output, float grad_scale, float* dout, float* stats,
                std::uint16_t* dout_bf16 = nullptr, std::uint16_t* out_bf16 = nullptr);
// The logits a training model keeps under --precision `precision`: bf16
// for xent under bf16 (the fused classifier reads them so), else fp32.
inline Logits logits_precision(const std::string& precision, LossKind loss) {
  return precision == "bf16" && loss == LossKind::kXent ? Logits::kBf16 : Logits::kFp32;
}
// The loss terms per sample that apply_loss sums: T for xent on a sequence
// output [T, C], else 1.
int loss_terms_per_sample(LossKind loss, const Shape& output);

}  // namespace dptrain
