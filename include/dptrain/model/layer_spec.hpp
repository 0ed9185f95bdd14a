// Implements: the --model spec (docs/design.md section 2) as data, and what can
// be known from a spec and an input shape without a backend: the layers
// themselves, the parameter and buffer layout, the output shape. The
// checkpoint reader, inspect and the trainer use these before (or without)
// building a model on a device.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/model/layer.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

// One token of a --model spec, validated by its layer family's parser.
struct LayerSpec {
  std::string kind;               // the token's name: "dense", "relu", ...
  std::vector<std::string> args;  // the ':'-separated arguments, in canonical form
  std::string token;              // as written (trimmed), for messages
  std::vector<LayerSpec> inner = {};  // the layers inside a block: res(L,...)
};

// "dense:256,relu,dense:10" -> one LayerSpec per token. Throws
// Error(kUsage) naming the bad token and listing the valid ones, or saying
// that the last layer must give the output width (dense:N).
std::vector<LayerSpec> parse_model_spec(const std::string& spec);

// One layer of spec's family, built for ctx (its input shape, name and
// arena offsets); a container layer builds its inner layers this way.
// Throws Error(kUsage) for an unknown kind or a shape it cannot take.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const LayerContext& ctx);

// The layers of specs applied to samples of shape `input`, in order, with
// their arena offsets (parameters of layer i follow those of layer i - 1).
// Host objects only: bind() and allocate() make them ready to compute.
// Throws Error(kUsage) for an unknown kind or a shape a layer cannot take.
// Builds layers one after another, as they come in the spec (the parts of
// a block included): names each kind<i> with i counting that kind so far,
// and lays its tensors out after those built before it.
class LayerBuilder {
 public:
  // vocab > 0: the model's input is token ids [N, T] of that vocabulary,
  // handed to the first layer built (which must be embed:D).
  explicit LayerBuilder(int vocab = 0) : vocab_(vocab) {}
  std::unique_ptr<Layer> build(const LayerSpec& spec, const Shape& input);
  // A part named by its block ("res0/proj"), not counted among its kind;
  // index seeds its init.
  std::unique_ptr<Layer> build_named(const LayerSpec& spec, const Shape& input,
                                     const std::string& name, int index);

 private:
  std::map<std::string, int> seen_;
  std::size_t param_offset_ = 0, buffer_offset_ = 0;
  int vocab_ = 0;  // reset once the first layer took it
};

// vocab > 0: samples are token ids [N, T] (input = {T}) of that vocabulary;
// the first layer must then be embed:D. Error(kUsage) otherwise.
std::vector<std::unique_ptr<Layer>> build_layers(const std::vector<LayerSpec>& specs,
                                                 const Shape& input, int vocab = 0);

struct ModelLayout {
  std::vector<ParamInfo> params;   // the parameter arena, in layer order
  std::vector<ParamInfo> buffers;  // the buffer arena (non-trained state)
  Shape output;                    // per sample
};
// What a Model built from specs on `input` holds, without building it.
ModelLayout model_layout(const std::vector<LayerSpec>& specs, const Shape& input, int vocab = 0);
// Values per sample of the model's output.
int output_width(const std::vector<LayerSpec>& specs, const Shape& input, int vocab = 0);
// The output width the last layer gives whatever the input shape (dense:N
// gives N); parse_model_spec only accepts specs whose last layer gives one.
int spec_output_width(const std::vector<LayerSpec>& specs);

}  // namespace dptrain
