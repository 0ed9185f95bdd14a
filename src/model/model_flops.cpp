// Implements: model FLOPs per token (see dptrain/model/model_flops.hpp), read
// off the layers' specs and shapes.
#include "dptrain/model/model_flops.hpp"

#include <string>

#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

ModelFlops model_flops(const Model& m, int tokens) {
  ModelFlops f;
  f.params = m.num_params();
  f.matmul_params = f.params;
  for (std::size_t i = 0; i < m.num_layers(); ++i) {
    const Layer& l = m.layer(i);
    const std::string spec = l.spec();
    std::size_t own = 0;
    for (const ParamInfo& p : l.params()) own += p.count;
    if (spec.rfind("embed:", 0) == 0 || spec == "pos") f.matmul_params -= own;
    // Each attn inside this layer (a res block holds one) works on its
    // [T, D] input, as the block does.
    const int attn = count_of(spec, "attn:");
    if (attn > 0 && l.input_shape().rank() == 2) {
      f.attention_layers += attn;
      f.attention += attn * 12.0 * tokens * l.input_shape()[1];
    }
  }
  return f;
}

}  // namespace dptrain
