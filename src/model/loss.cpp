// Implements: the loss of --loss (see loss.hpp).
#include "dptrain/model/loss.hpp"

#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {

LossKind parse_loss(const std::string& name) {
  if (name == "xent") return LossKind::kXent;
  if (name == "mse") return LossKind::kMse;
  throw_bad_choice("loss", name, "xent, mse");
}

const char* loss_name(LossKind loss) { return loss == LossKind::kXent ? "xent" : "mse"; }

int loss_terms_per_sample(LossKind loss, const Shape& output) {
  return loss == LossKind::kXent && output.rank() == 2 ? output[0] : 1;
}

void apply_loss(Backend& be, LossKind loss, const float* out, const Shard& shard,
                const Shape& output, float grad_scale, float* dout, float* stats,
                std::uint16_t* dout_bf16, std::uint16_t* out_bf16) {
  if (shard.rows == 0) return;
  const int terms = loss_terms_per_sample(loss, output);
  const int width = static_cast<int>(output.size()) / terms;
  DPT_REQUIRE(!out_bf16 || loss == LossKind::kXent, ExitCode::kOther,
              "apply_loss: a bf16 output needs --loss xent");
  if (out_bf16)
    be.kernels<LossKernels>().softmax_xent_bf16(out_bf16, shard.labels, shard.rows * terms, width,
                                                grad_scale, dout ? out_bf16 : nullptr, stats);
  else if (loss == LossKind::kXent)
    be.kernels<LossKernels>().softmax_xent(out, shard.labels, shard.rows * terms, width, grad_scale,
                                           dout, dout_bf16, stats);
  else
    be.kernels<LossKernels>().mse(out, shard.targets, shard.rows, width, grad_scale, dout,
                                  dout_bf16, stats);
}

}  // namespace dptrain
