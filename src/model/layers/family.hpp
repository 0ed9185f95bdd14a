// Implements: what a layer family file (src/model/layers/<family>.cpp) hands the
// registry (registry.cpp): the token names it parses, how it is listed in
// --model errors, its parser and its factory. Adding a family is a new file
// defining one of these and one line in registry.cpp.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_spec.hpp"

namespace dptrain {

// Thrown by a family's parser for a token it cannot accept; what() is the
// reason shown in parentheses ("" for none). parse_model_spec turns it into
// the Error(kUsage) that names the token and the whole spec.
class BadLayerToken : public std::invalid_argument {
 public:
  explicit BadLayerToken(const std::string& why = {}) : std::invalid_argument(why) {}
};

struct LayerFamily {
  std::vector<std::string> kinds;  // token names before any ':' ("dense"; "relu", "tanh", ...)
  std::string usage;               // its entry in the list of valid layers: "dense:N (N >= 1)"
  // Validates a trimmed token whose kind is one of `kinds`; returns its
  // spec with canonical arguments or throws BadLayerToken.
  LayerSpec (*parse)(const std::string& token);
  // Builds the layer for ctx.input; throws Error(kUsage) when it cannot
  // take that shape.
  std::unique_ptr<Layer> (*make)(const LayerSpec& spec, const LayerContext& ctx);
  // The output width whatever the input (dense:N gives N), for families
  // that can be last; nullptr for those whose width follows their input.
  int (*fixed_width)(const LayerSpec& spec);
  std::string width_form;  // how the last-layer error names it ("dense:N"); "" if no fixed width
};

// The families, in the order --model errors list them (registry.cpp).
const std::vector<LayerFamily>& layer_families();
// The family that parses tokens named `kind`, or nullptr.
const LayerFamily* find_layer_family(const std::string& kind);

// Splits a comma-separated list of layers (parentheses nest: the commas of
// res(...) stay inside it) and parses each; `spec` is the whole --model, for
// messages. For block families, whose parsers parse their insides with it.
std::vector<LayerSpec> parse_layer_list(const std::string& list, const std::string& spec);

// The whole number `text` (>= 1) of a token's argument called `what`;
// throws BadLayerToken("<what> must be ...") otherwise.
int parse_positive(const std::string& text, const std::string& what);
// "layer 'attn:4' (attn0)", for build-time messages.
std::string layer_label(const LayerSpec& spec, const LayerContext& ctx);

// One per family file.
LayerFamily dense_family();       // layers/dense.cpp
LayerFamily activation_family();  // layers/activation.cpp
LayerFamily conv_family();        // layers/conv.cpp
LayerFamily pool_family();        // layers/pool.cpp: maxpool, avgpool, gap
LayerFamily flatten_family();     // layers/flatten.cpp
LayerFamily residual_family();    // layers/residual.cpp
LayerFamily norm_family();        // layers/norm.cpp: bn, bn:local
LayerFamily dropout_family();     // layers/dropout.cpp
LayerFamily embedding_family();   // layers/embedding.cpp: embed:D
LayerFamily position_family();    // layers/position.cpp: pos
LayerFamily layer_norm_family();  // layers/layer_norm.cpp: ln
LayerFamily attention_family();   // layers/attention.cpp: attn:H[:causal]
LayerFamily sequence_family();    // layers/sequence.cpp: seq

// gap on a sequence [N, T, D]: the mean over positions (layers/sequence.cpp;
// the pool family hands it sequences).
std::unique_ptr<Layer> make_position_mean(const LayerContext& ctx);

}  // namespace dptrain
