// Implements: the layer registry — the explicit list of layer families
// (a static library drops self-registering objects nobody references) —
// and on top of it --model parsing, building layers from specs and the
// backend-free layout functions of layer_spec.hpp.
#include <charconv>
#include <map>
#include <utility>

#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

std::vector<LayerFamily> make_families() {
  std::vector<LayerFamily> families;
  families.push_back(dense_family());
  families.push_back(activation_family());
  families.push_back(conv_family());
  families.push_back(pool_family());
  families.push_back(flatten_family());
  families.push_back(residual_family());
  families.push_back(norm_family());
  families.push_back(dropout_family());
  families.push_back(embedding_family());
  families.push_back(position_family());
  families.push_back(layer_norm_family());
  families.push_back(attention_family());
  families.push_back(sequence_family());
  return families;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::string valid_tokens() {
  std::string list;
  for (const LayerFamily& f : layer_families()) list += (list.empty() ? "" : ", ") + f.usage;
  return list;
}

// How the last-layer error names the layers that give an output width.
std::string width_forms() {
  std::string forms;
  for (const LayerFamily& f : layer_families())
    if (f.fixed_width) forms += (forms.empty() ? "" : " or ") + f.width_form;
  return forms;
}

[[noreturn]] void bad_token(const std::string& token, const std::string& spec,
                            const std::string& why = {}) {
  throw Error(ExitCode::kUsage, "--model: bad layer '" + token + "' in '" + spec + "'" +
                                    (why.empty() ? "" : " (" + why + ")") +
                                    "; valid layers: " + valid_tokens());
}

LayerSpec parse_token(const std::string& token, const std::string& spec) {
  const LayerFamily* family = find_layer_family(token.substr(0, token.find_first_of(":(")));
  if (!family) bad_token(token, spec);
  try {
    return family->parse(token);
  } catch (const BadLayerToken& e) {
    bad_token(token, spec, e.what());
  }
}

// K of a repetition token "K*(L,...)" (docs/design.md section 2), or 0 for
// any other token; a malformed repetition is a bad token.
int repetitions(const std::string& token, const std::string& spec) {
  const std::size_t star = token.find('*');
  if (star == std::string::npos || star > token.find('(')) return 0;
  const std::string count = trim(token.substr(0, star));
  const std::string rest = trim(token.substr(star + 1));
  if (count.empty() || count.find_first_not_of("0123456789") != std::string::npos || count.size() > 4)
    bad_token(token, spec, "a repetition is K*(L,...) with K a whole number from 1 to 9999");
  if (rest.size() < 3 || rest.front() != '(' || rest.back() != ')' || rest != token.substr(token.find('(')))
    bad_token(token, spec, "a repetition is K*(L,...)");
  const int times = std::stoi(count);
  if (times < 1) bad_token(token, spec, "K*(...) repeats at least once");
  if (trim(rest.substr(1, rest.size() - 2)).empty()) bad_token(token, spec, "empty repetition");
  return times;
}

const LayerFamily& family_of(const LayerSpec& spec) {
  const LayerFamily* family = find_layer_family(spec.kind);
  DPT_REQUIRE(family, ExitCode::kUsage, "unknown layer kind '" + spec.kind + "'");
  return *family;
}

}  // namespace

int parse_positive(const std::string& text, const std::string& what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw BadLayerToken(what + " must be a whole number");
  if (value < 1) throw BadLayerToken(what + " must be >= 1");
  return value;
}

std::string layer_label(const LayerSpec& spec, const LayerContext& ctx) {
  return "layer '" + spec.token + "' (" + ctx.name + ")";
}

const std::vector<LayerFamily>& layer_families() {
  static const std::vector<LayerFamily> families = make_families();
  return families;
}

const LayerFamily* find_layer_family(const std::string& kind) {
  for (const LayerFamily& f : layer_families())
    for (const std::string& k : f.kinds)
      if (k == kind) return &f;
  return nullptr;
}

std::vector<LayerSpec> parse_layer_list(const std::string& list, const std::string& spec) {
  std::vector<LayerSpec> layers;
  std::size_t begin = 0;
  int depth = 0;  // inside how many parentheses: commas there belong to a block
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) bad_token(trim(list.substr(begin, i + 1 - begin)), spec, "')' without '('");
    if (c != ',' || depth > 0) continue;
    const std::string token = trim(list.substr(begin, i - begin));
    if (token.empty()) bad_token(token, spec, "empty layer");
    if (const int times = repetitions(token, spec)) {
      const std::size_t open = token.find('(');
      const std::vector<LayerSpec> inner =
          parse_layer_list(token.substr(open + 1, token.size() - open - 2), spec);
      for (int k = 0; k < times; ++k) layers.insert(layers.end(), inner.begin(), inner.end());
    } else {
      layers.push_back(parse_token(token, spec));
    }
    begin = i + 1;
  }
  if (depth > 0)
    bad_token(trim(list.substr(begin)), spec, "'(' with no ')'");
  return layers;
}

std::vector<LayerSpec> parse_model_spec(const std::string& spec) {
  std::vector<LayerSpec> layers = parse_layer_list(spec, spec);
  if (!family_of(layers.back()).fixed_width)
    throw Error(ExitCode::kUsage, "--model: the last layer of '" + spec + "' must be " +
                                      width_forms() + " (it gives the output width)");
  return layers;
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const LayerContext& ctx) {
  return family_of(spec).make(spec, ctx);
}

std::unique_ptr<Layer> LayerBuilder::build(const LayerSpec& spec, const Shape& input) {
  const int index = seen_[spec.kind]++;
  return build_named(spec, input, spec.kind + std::to_string(index), index);
}

std::unique_ptr<Layer> LayerBuilder::build_named(const LayerSpec& spec, const Shape& input,
                                                 const std::string& name, int index) {
  LayerContext ctx;
  ctx.input = input;
  ctx.name = name;
  ctx.index = index;
  ctx.param_offset = param_offset_;
  ctx.buffer_offset = buffer_offset_;
  ctx.builder = this;
  ctx.vocab = std::exchange(vocab_, 0);  // only the model's first layer reads ids
  std::unique_ptr<Layer> layer = make_layer(spec, ctx);
  // A block's parts advanced the offsets as they were built; its tensors
  // (theirs) end where the last part's do.
  if (!layer->params().empty()) param_offset_ = arena_size(layer->params());
  if (!layer->buffers().empty()) buffer_offset_ = arena_size(layer->buffers());
  return layer;
}

std::vector<std::unique_ptr<Layer>> build_layers(const std::vector<LayerSpec>& specs,
                                                 const Shape& input, int vocab) {
  DPT_REQUIRE(!specs.empty(), ExitCode::kUsage, "the model needs at least one layer");
  DPT_REQUIRE(family_of(specs.back()).fixed_width, ExitCode::kUsage,
              "the model needs " + width_forms() + " last (it gives the output width)");
  DPT_REQUIRE(vocab <= 0 || specs.front().kind == "embed", ExitCode::kUsage,
              "--model: the data are token ids [N, T] (a token set), so the model must begin "
              "with embed:D, not '" + specs.front().token + "'");
  std::vector<std::unique_ptr<Layer>> layers;
  LayerBuilder builder(vocab);
  Shape shape = input;
  for (const LayerSpec& spec : specs) {
    layers.push_back(builder.build(spec, shape));
    shape = layers.back()->output_shape();
  }
  return layers;
}

ModelLayout model_layout(const std::vector<LayerSpec>& specs, const Shape& input, int vocab) {
  ModelLayout layout;
  for (const auto& l : build_layers(specs, input, vocab)) {
    layout.params.insert(layout.params.end(), l->params().begin(), l->params().end());
    layout.buffers.insert(layout.buffers.end(), l->buffers().begin(), l->buffers().end());
    layout.output = l->output_shape();
  }
  return layout;
}

int output_width(const std::vector<LayerSpec>& specs, const Shape& input, int vocab) {
  return static_cast<int>(model_layout(specs, input, vocab).output.size());
}

int spec_output_width(const std::vector<LayerSpec>& specs) {
  DPT_REQUIRE(!specs.empty(), ExitCode::kUsage, "the model needs at least one layer");
  const LayerFamily& last = family_of(specs.back());
  DPT_REQUIRE(last.fixed_width, ExitCode::kUsage,
              "the model needs " + width_forms() + " last (it gives the output width)");
  return last.fixed_width(specs.back());
}

}  // namespace dptrain
