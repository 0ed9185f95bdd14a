// Implements: the Model (model.hpp) — arenas and per-layer buffers sized
// once from the layers' shapes, and forward, backward and init as walks over
// the layers that know no layer kind. Talks to the device only through
// Backend, so the same code runs on the CPU and CUDA backends.
#include "dptrain/model/model.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

Shape flat_input(int input_dim) {
  DPT_REQUIRE(input_dim >= 1, ExitCode::kData, "the input width must be at least 1");
  return Shape{input_dim};
}

}  // namespace

Model::Model(Backend& backend, const std::vector<LayerSpec>& specs, int input_dim, int max_rows)
    : Model(backend, specs, flat_input(input_dim), max_rows) {}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "blocks") return Recompute::kBlocks;
  throw Error(ExitCode::kUsage, "--recompute: '" + name + "' is not one of none, blocks");
}

Model::Model(Backend& backend, const std::vector<LayerSpec>& specs, const Shape& input,
             int max_rows, int vocab, Recompute recompute, ModelStorage storage, Logits logits)
    : Model(backend, build_layers(specs, input, vocab), input, max_rows, vocab, recompute,
            storage, logits) {}

Model::Model(Backend& backend, std::vector<std::unique_ptr<Layer>> layers, const Shape& input,
             int max_rows, int vocab, Recompute recompute, ModelStorage storage, Logits logits)
    : be_(backend),
      layers_(std::move(layers)),
      input_(input),
      max_rows_(max_rows),
      vocab_(vocab),
      recompute_(recompute == Recompute::kBlocks),
      storage_(storage) {
  DPT_REQUIRE(!layers_.empty(), ExitCode::kUsage, "the model needs at least one layer");
  DPT_REQUIRE(input_.rank() >= 1, ExitCode::kData, "the model input needs at least one dimension");
  DPT_REQUIRE(max_rows_ >= 0, ExitCode::kOther, "max_rows must not be negative");

  const std::size_t max_input = collect_layouts();
  if (storage_ == ModelStorage::kAllocated) {
    params_ = DeviceBuffer<float>(be_, num_params());
    grads_ = DeviceBuffer<float>(be_, num_params());
  }
  make_params_twin();
  if (!plans_only()) buffers_ = DeviceBuffer<float>(be_, num_buffers());
  const std::size_t held_before = be_.buffer_bytes();
  bind_layers(logits);
  reserve_model_buffers(max_input);
  // Buffers layers allocate themselves (per channel, a few floats).
  own_layer_bytes_ = be_.buffer_bytes() - held_before;
  if (plans_only()) {
    activation_bytes_ = activation_plan(max_rows_, this->recompute()).total();
  } else {
    arena_.allocate(be_, max_rows_, recompute_);
    activation_bytes_ = be_.buffer_bytes() - held_before;
  }
  largest_activation_bytes_ = std::max(dout_.size(), dbuf_a_.size());
  for (const auto& a : acts_) largest_activation_bytes_ = std::max(largest_activation_bytes_, a.size());
  largest_activation_bytes_ *= sizeof(float);
}

std::size_t Model::collect_layouts() {
  Shape shape = input_;
  std::size_t max_input = 0;  // largest input of a layer, per sample
  first_trained_ = layers_.size();
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = *layers_[li];
    DPT_REQUIRE(l.input_shape() == shape, ExitCode::kOther,
                l.name() + " was built for input " + l.input_shape().to_string() + ", it gets " +
                    shape.to_string());
    for (const ParamInfo& p : l.params()) {
      DPT_REQUIRE(p.offset == num_params(), ExitCode::kOther,
                  p.path() + ": arena offset out of order");
      params_layout_.push_back(p);
    }
    for (const ParamInfo& p : l.buffers()) {
      DPT_REQUIRE(p.offset == num_buffers(), ExitCode::kOther,
                  p.path() + ": buffer offset out of order");
      buffers_layout_.push_back(p);
    }
    if (!l.params().empty() && first_trained_ == layers_.size()) first_trained_ = li;
    max_input = std::max(max_input, shape.size());
    shape = l.output_shape();
  }
  return max_input;
}

void Model::bind_layers(Logits logits) {
  bound_grads_.assign(layers_.size(), nullptr);
  const ArenaPointers arenas{params_.get(), grads_.get(), buffers_.get(), &arena_, twin_.get()};
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    Layer& l = *layers_[li];
    l.bind(arenas, &step_);
    // The last layer's output may hold the loss's gradient by the time its
    // backward runs (output_grad), so its forward cannot run again there.
    const bool last = li + 1 == layers_.size();
    arena_.begin_layer(li, li >= first_trained_, !last || l.backward_reads_output());
    if (last && logits == Logits::kBf16) output_bf16_ = l.write_output_bf16_only(be_);
    l.allocate(be_, max_rows_);
  }
  // A layer runs the next in its passes (Layer::absorbs_next) where the
  // next is not the last: the loss may write its gradient over the last
  // layer's output, which the absorbing layer's backward reads.
  absorbs_.assign(layers_.size(), false);
  for (std::size_t li = 0; li + 2 < layers_.size(); ++li)
    absorbs_[li] = !(li > 0 && absorbs_[li - 1]) && layers_[li]->absorbs_next(*layers_[li + 1]);
}

void Model::reserve_model_buffers(std::size_t max_input) {
  arena_.begin_model_scope();
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    // An absorbing layer writes the next one's output, never its own.
    const std::size_t per_row = absorbs_[li] ? 0 : layers_[li]->output_shape().size();
    if (li + 1 < layers_.size() || !output_bf16_) {
      acts_.push_back(model_buffer(per_row, Lifetime::kSaved));
      continue;
    }
    // The head's output lives in its bf16 slot; this is the scratch of
    // the epilogue's fallback, a few rows of it (layer.hpp).
    const RowBytes bytes = [per_row](int rows) {
      return std::size_t(bf16_output_scratch_samples(per_row, rows)) * per_row * sizeof(float);
    };
    acts_.emplace_back(&arena_, arena_.reserve(bytes, Lifetime::kPass),
                       bytes(max_rows_) / sizeof(float));
  }
  // The loss writes its gradient over the output where the last layer's
  // backward does not read the output (Layer::backward_reads_output).
  if (layers_.back()->backward_reads_output())
    dout_ = model_buffer(output_shape().size(), Lifetime::kPass);
  dbuf_a_ = model_buffer(max_input, Lifetime::kPass);
  dbuf_b_ = model_buffer(max_input, Lifetime::kPass);
  if (be_.caps().rounds_gemm_operands) {
    const RowBytes bytes = [max_input](int rows) { return std::size_t(rows) * max_input * 2; };
    for (ArenaBuffer<std::uint16_t>* b : {&dbuf16_a_, &dbuf16_b_})
      *b = ArenaBuffer<std::uint16_t>(&arena_, arena_.reserve(bytes, Lifetime::kPass),
                                      bytes(max_rows_) / 2);
  }
}

ArenaBuffer<float> Model::model_buffer(std::size_t per_row, Lifetime life) {
  const RowBytes bytes = [per_row](int rows) { return std::size_t(rows) * per_row * sizeof(float); };
  return ArenaBuffer<float>(&arena_, arena_.reserve(bytes, life), bytes(max_rows_) / sizeof(float));
}

ActivationPlan Model::activation_plan(int rows, Recompute recompute) const {
  const ActivationArena::Bytes b = arena_.bytes(rows, recompute == Recompute::kBlocks);
  // What layers hold themselves (batch statistics) is kept from forward.
  return {own_layer_bytes_ + b.saved, b.total - b.saved};
}

void Model::init(std::uint64_t seed) {
  require_storage("init");
  if (!params_.get()) {  // kShardedParams: the buffers only, a layer at a time
    std::vector<float> host, buffers(num_buffers(), 0.0f);
    for (std::size_t li = 0; li < layers_.size(); ++li) init_layer(seed, li, host, buffers);
    if (!buffers.empty())
      be_.copy_to_device(buffers_.get(), buffers.data(), buffers.size() * sizeof(float));
    return;
  }
  std::vector<float> params(num_params(), 0.0f), buffers(num_buffers(), 0.0f);
  const ArenaPointers host{params.data(), nullptr, buffers.data()};
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const bool next_rectifies = li + 1 < layers_.size() && layers_[li + 1]->rectifies();
    layers_[li]->init(seed, next_rectifies, host);
  }
  if (!params.empty() && params_.get())
    be_.copy_to_device(this->params(), params.data(), params.size() * sizeof(float));
  if (!buffers.empty())
    be_.copy_to_device(buffers_.get(), buffers.data(), buffers.size() * sizeof(float));
}

void Model::init_params(std::uint64_t seed, ArenaRange range, float* dst) const {
  std::vector<float> host, buffers(num_buffers(), 0.0f);
  const std::size_t end = range.offset + range.count;
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const ArenaRange mine = layer_params(li);
    const std::size_t from = std::max(mine.offset, range.offset);
    const std::size_t to = std::min(mine.offset + mine.count, end);
    if (from >= to) continue;
    init_layer(seed, li, host, buffers);
    be_.copy_to_device(dst + (from - range.offset), host.data() + (from - mine.offset),
                       (to - from) * sizeof(float));
  }
}

void Model::init_layer(std::uint64_t seed, std::size_t li, std::vector<float>& host,
                       std::vector<float>& buffers) const {
  const ArenaRange mine = layer_params(li);
  host.assign(mine.count, 0.0f);  // zero-filled, as init hands them over
  const bool next_rectifies = li + 1 < layers_.size() && layers_[li + 1]->rectifies();
  layers_[li]->init(seed, next_rectifies,
                    {arena_base(host.data(), mine.offset), nullptr, buffers.data()});
}

ArenaRange Model::layer_params(std::size_t li) const {
  const auto& p = layers_[li]->params();
  if (p.empty()) return {0, 0};
  return {p.front().offset, p.back().offset + p.back().count - p.front().offset};
}

std::size_t Model::largest_layer_params() const {
  std::size_t most = 0;
  for (std::size_t li = 0; li < layers_.size(); ++li) most = std::max(most, layer_params(li).count);
  return most;
}

void Model::bind_layer(std::size_t li, float* params_base, float* grads_base) {
  bound_grads_[li] = grads_base;
  layers_[li]->bind({params_base, grads_base, buffers_.get(), &arena_}, &step_);
}

TensorView Model::output_of(std::size_t li, int rows) const {
  return {acts_[li].get(), rows, layers_[li]->output_shape()};
}

ConstTensorView Model::input_of(std::size_t li, const float* x, int rows) const {
  if (li == 0) return {x, rows, input_};
  return {acts_[li - 1].get(), rows, layers_[li - 1]->output_shape()};
}

void Model::require_storage(const char* what) const {
  DPT_REQUIRE(!plans_only(), ExitCode::kOther,
              std::string("Model::") + what + " on a model built to plan only");
}

// The bf16 twin where GEMMs read bf16 operands; --shard-params has no
// whole arena to twin (its layers round their gathered weights).
void Model::make_params_twin() {
  const bool sharded = storage_ == ModelStorage::kShardedParams ||
                       storage_ == ModelStorage::kPlanOnlyShardedParams;
  if (sharded || !be_.caps().rounds_gemm_operands || num_params() == 0) return;
  twin_ = std::make_unique<ParamsBf16>();
  if (storage_ != ModelStorage::kAllocated) return;
  params16_ = DeviceBuffer<std::uint16_t>(be_, num_params());
  twin_->data = params16_.get();
}

void Model::round_params() {
  if (twin_current_ || !params16_.get()) return;
  be_.kernels<ConvertKernels>().to_bf16(params_.get(), params16_.get(), num_params());
  twin_current_ = true;
}

void Model::stage_step() {
  require_storage("stage_step");
  round_params();
  for (const auto& l : layers_) l->stage_step(be_);
}

const float* Model::forward(const float* x, int rows, LayerListener* events, Mode mode) {
  require_storage("forward");
  DPT_REQUIRE(rows >= 0 && rows <= max_rows_, ExitCode::kOther,
              "forward with " + std::to_string(rows) + " rows, more than max_rows " +
                  std::to_string(max_rows_));
  if (rows == 0) {
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      if (events) events->before_forward(li);
      if (mode == Mode::kTrain && layers_[li]->communicates()) layers_[li]->forward_empty(be_);
    }
    return acts_.back().get();
  }
  round_params();
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    if (events) events->before_forward(li);
    if (absorbs_[li]) {  // this layer and the next in one call
      layers_[li]->forward_absorbing_next(be_, input_of(li, x, rows), output_of(li + 1, rows),
                                          mode);
      if (events) events->between_layers();
      if (events) events->before_forward(++li);
    } else {
      layers_[li]->forward(be_, input_of(li, x, rows), output_of(li, rows), mode);
    }
    if (events) events->between_layers();
  }
  return acts_.back().get();
}

void Model::backward(const float* x, const float* dout, int rows, LayerListener* events,
                     const std::uint16_t* dout_bf16) {
  require_storage("backward");
  DPT_REQUIRE(rows >= 0 && rows <= max_rows_, ExitCode::kOther,
              "backward with " + std::to_string(rows) + " rows, more than max_rows " +
                  std::to_string(max_rows_));
  if (rows == 0 || first_trained_ == layers_.size()) {
    // An empty shard still takes part in the all-reduce: it adds exact zeros.
    if (num_params() && grads_.get()) be_.fill(grads_.get(), 0.0f, num_params());
    for (std::size_t li = layers_.size(); li-- > 0;) {  // the peers' order, last layer first
      if (events && !layers_[li]->params().empty()) events->before_backward(li);
      // kShardedParams: the strategy's gradient buffer for this layer.
      if (!grads_.get() && bound_grads_[li]) {
        const ArenaRange r = layer_params(li);
        be_.fill(bound_grads_[li] + r.offset, 0.0f, r.count);
      }
      if (rows == 0 && layers_[li]->communicates()) layers_[li]->backward_empty(be_);
    }
    if (events) events->grads_ready(0);
    return;
  }
  round_params();  // as forward left it, unless the parameters were taken since
  // Layers before the first one with parameters have none to train, so the
  // gradient need not flow past it.
  ConstTensorView dy{dout, rows, output_shape(), dout_bf16};
  for (std::size_t li = layers_.size(); li-- > first_trained_;) {
    Layer& l = *layers_[li];
    const ConstTensorView x_in = input_of(li, x, rows);
    if (events) events->before_backward(li);
    if (li > 0 && absorbs_[li - 1]) {  // runs in the previous layer's passes, with dy
      if (events) events->between_layers();
      continue;
    }
    // dy is the gradient w.r.t. the next layer's output where this layer
    // absorbs it (next_y), else w.r.t. its own.
    const TensorView next_y = absorbs_[li] ? output_of(li + 1, rows) : TensorView{};
    // --recompute blocks: what the layer saved in forward, written again.
    if (arena_.recomputes(li, recompute_)) {
      if (absorbs_[li]) l.forward_absorbing_next(be_, x_in, next_y, Mode::kRecompute);
      else l.forward(be_, x_in, output_of(li, rows), Mode::kRecompute);
    }
    if (!l.params().empty()) {
      if (absorbs_[li]) l.backward_params_absorbing_next(be_, x_in, next_y, dy);
      else l.backward_params(be_, x_in, dy);
      // Arena order is layer order, so this layer and all later ones are done.
      if (events) events->grads_ready(l.params().front().offset);
      if (li == first_trained_) break;
    }
    // dbuf_a_ or dbuf_b_, whichever dy is not in, with its bf16 copy where
    // the layer writes one (else null: the layer before rounds dx itself).
    const bool in_a = dy.data != dbuf_a_.get();
    std::uint16_t* dx16 = !l.writes_input_grad_bf16() ? nullptr
                          : in_a                      ? dbuf16_a_.get()
                                                      : dbuf16_b_.get();
    const TensorView dx{in_a ? dbuf_a_.get() : dbuf_b_.get(), rows, l.input_shape(), dx16};
    if (absorbs_[li]) l.backward_input_absorbing_next(be_, x_in, next_y, dy, dx);
    else l.backward_input(be_, x_in, output_of(li, rows), dy, dx);
    if (events) events->between_layers();
    dy = dx;
  }
}

bool Model::communicates() const {
  return std::any_of(layers_.begin(), layers_.end(),
                     [](const auto& l) { return l->communicates(); });
}

std::string Model::implementations() const {
  std::vector<std::string> all;
  for (const auto& l : layers_) l->implementations(all);
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& name : all) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == name; });
    if (it == counts.end()) counts.emplace_back(name, 1);
    else ++it->second;
  }
  std::string s;
  for (const auto& [name, n] : counts)
    s += (s.empty() ? "" : ", ") + name + " (" + std::to_string(n) + (n == 1 ? " layer)" : " layers)");
  return s;
}

std::string Model::spec() const {
  std::string s;
  for (const auto& l : layers_) {
    if (!s.empty()) s += ',';
    s += l->spec();
  }
  return s;
}

}  // namespace dptrain
