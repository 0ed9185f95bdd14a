// Implements: the model FLOPs of a token model's training step (docs/design.md
// section 5): what the model needs per token, whatever the kernels do, as
// train events' `mfu` and dptrain_gpt_bench's throughput row count them.
//
//   6 N + 12 L T D   per token
// N: the parameters that enter a matrix product, forward (2 N: a multiply
// and an add per weight) and backward (4 N: the input's gradient and the
// weight's); every parameter but the token and position tables, which are
// looked up and added, not multiplied (an output head that is not tied to
// the token table counts). Biases and layer-norm weights are in N as in
// the usual 6 N count; they are 0.1% of it.
// 12 L T D: attention's two batched products per layer, Q Kᵀ and P V, 2 T hd
// FLOPs per token and head each, 4 T D per token over the H heads (D =
// H hd); backward has two products per forward one, 8 T D; 12 T D per
// token and layer over the full T x T. A causal model needs only the lower
// half of the scores; the count keeps the full T (as PaLM's 12 L H Q T,
// appendix B), so a kernel that skips the masked half shows up as a higher
// MFU, never as more model FLOPs.
#pragma once

#include <cstddef>

namespace dptrain {

class Model;

struct ModelFlops {
  std::size_t params = 0, matmul_params = 0;
  int attention_layers = 0;
  double attention = 0.0;  // FLOPs per token, all attention layers
  double per_token() const { return 6.0 * double(matmul_params) + attention; }
};

// The count for m on sequences of `tokens` positions.
ModelFlops model_flops(const Model& m, int tokens);

}  // namespace dptrain
