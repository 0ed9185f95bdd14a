// Implements: the residual block family, `res(L,...)` — y = f(x) + s(x),
// f the layers inside, s the identity when f keeps the shape, else a 1×1
// convolution with f's total stride and f's output channels, then bn (the
// projection shortcut of ResNet), named res<j>/proj and res<j>/proj_bn.
// The parts are built by the model's LayerBuilder, so they are named and
// laid out in spec order among the model's layers; the block reserves
// their activations and its gradient buffers (per pass) in the model's
// activation arena: a part's output is saved for backward only where a
// backward reads it (Layer::backward_reads_output, backward_reads_input).
// Where a part folds its neighbour into its GEMM (Layer::folds_next /
// folds_previous: dense and a gelu:tanh, on a backend that fuses epilogues),
// the chain makes the one call for both; the neighbour's output buffer is
// written all the same. A part that runs the next in its own passes
// (Layer::absorbs_next: bn and a relu) does so here as in the model's chain;
// its own output is then never stored. A part that can write its output's bf16
// rounding (ln) writes it into the next part's slot for its input (dense, attn
// under bf16: Layer::input_bf16), which then rounds nothing; where that copy
// is all the next part reads, the part writes the copy alone
// (Layer::output_read_in_bf16_only). With the identity shortcut, the block's
// output f + x is made by the body's last part as it writes its own
// (Layer::forward_adding: dense's and attn's GEMM epilogue adds x), and the
// block's input gradient df + dy by the body's first part as it writes its own
// input gradient (Layer::backward_input_adding: ln's kernel adds dy in its
// pass).
#include <algorithm>
#include <string>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/common/error.hpp"
#include "model/layers/family.hpp"

namespace dptrain {
namespace {

// The product of the strides of a block's layers (conv:C:K:S:P, pooling
// K:S; nested blocks recursively), read from their canonical arguments.
int total_stride(const std::vector<LayerSpec>& layers) {
  int stride = 1;
  for (const LayerSpec& l : layers) {
    if (l.kind == "conv" && l.args.size() >= 3) stride *= std::stoi(l.args[2]);
    if ((l.kind == "maxpool" || l.kind == "avgpool") && !l.args.empty())
      stride *= std::stoi(l.args.size() >= 2 ? l.args[1] : l.args[0]);
    if (l.kind == "res") stride *= total_stride(l.inner);
  }
  return stride;
}

using Parts = std::vector<std::unique_ptr<Layer>>;

class Residual final : public Layer {
 public:
  Residual(const LayerContext& ctx, const Shape& output, Parts body, Parts shortcut)
      : Layer(ctx, output), body_(std::move(body)), shortcut_(std::move(shortcut)) {
    for (const auto& p : body_) adopt_tensors(*p);
    for (const auto& p : shortcut_) adopt_tensors(*p);
  }

  std::string spec() const override {
    std::string s = "res(";
    for (std::size_t i = 0; i < body_.size(); ++i) {
      if (i) s += ',';
      s += body_[i]->spec();
    }
    return s + ")";
  }
  bool differs_in_eval() const override { return any([](const Layer& l) { return l.differs_in_eval(); }); }
  bool communicates() const override { return any([](const Layer& l) { return l.communicates(); }); }
  void implementations(std::vector<std::string>& out) const override {
    for (auto* parts : {&body_, &shortcut_})
      for (const auto& p : *parts) p->implementations(out);
  }

  void stage_step(Backend& be) override {
    for (auto* parts : {&body_, &shortcut_})
      for (const auto& p : *parts) p->stage_step(be);
  }

  void bind(const ArenaPointers& arenas, const StepInfo* step = nullptr) override {
    Layer::bind(arenas, step);
    for (auto* parts : {&body_, &shortcut_})
      for (const auto& p : *parts) p->bind(arenas, step);
  }

  void allocate(Backend& be, int max_rows) override {
    std::size_t widest = input_shape().size();
    for (auto* parts : {&body_, &shortcut_})
      for (const auto& p : *parts) p->allocate(be, max_rows);
    for (std::size_t first : {std::size_t(0), body_.size()})
      note_folds(first == 0 ? body_ : shortcut_, first, be.caps().rounds_gemm_operands);
    // A part whose output the next reads in bf16 alone may write only that
    // (where it is handed the next part's slot: run_chain).
    for (std::size_t i = 0; i + 1 < body_.size(); ++i)
      if (writes_bf16_[i] && !folds_next_[i] && !body_[i + 1]->backward_reads_input() &&
          !body_[i]->backward_reads_output())
        body_[i]->output_read_in_bf16_only();
    // The last part adds the identity shortcut as it writes the block's
    // output, unless it runs inside the part before's call (a fold) or its
    // backward reads its own output (which then exists nowhere).
    const std::size_t last = body_.size() - 1;
    adds_in_last_ = shortcut_.empty() && body_[last]->forward_adds() &&
                    !body_[last]->backward_reads_output() &&
                    !(last >= 1 && (folds_next_[last - 1] || absorbs_[last - 1]));
    for (std::size_t first : {std::size_t(0), body_.size()}) {
      const Parts& parts = first == 0 ? body_ : shortcut_;
      for (std::size_t i = 0; i < parts.size(); ++i) {
        const std::size_t size = parts[i]->output_shape().size();
        if ((first == 0 && i == last && adds_in_last_) || absorbs_[first + i])  // never stored
          acts_.emplace_back();
        else
          acts_.push_back(reserve<float>(be, max_rows, size, output_lifetime(parts, first, i)));
        hidden16_.push_back(mlp_bf16_[first + i]
                                ? reserve<std::uint16_t>(be, max_rows, size, Lifetime::kSaved)
                                : ArenaBuffer<std::uint16_t>());
        widest = std::max(widest, size);
      }
    }
    // The first part adds the shortcut's gradient, unless the part after it
    // carries the gradient through it (a fold) or it runs the part after it
    // (then the chain's gradient is w.r.t. that part's output).
    adds_in_first_ =
        shortcut_.empty() && !(body_.size() > 1 && folds_previous_[1]) && !absorbs_[0];
    grad_a_ = reserve<float>(be, max_rows, widest, Lifetime::kPass);
    grad_b_ = reserve<float>(be, max_rows, widest, Lifetime::kPass);
    if (!shortcut_.empty()) dx_ = reserve<float>(be, max_rows, input_shape().size(), Lifetime::kPass);
  }

  void init(std::uint64_t seed, bool next_rectifies, const ArenaPointers& host) const override {
    init_chain(body_, seed, next_rectifies, host);
    init_chain(shortcut_, seed, false, host);
  }

  void forward(Backend& be, ConstTensorView x, TensorView y, Mode mode) override {
    if (adds_in_last_) {  // y = f(x) + x written by the last part
      run_chain(be, body_, 0, x, mode, &y);
      return;
    }
    const ConstTensorView f = run_chain(be, body_, 0, x, mode);
    const ConstTensorView s = shortcut_.empty() ? x : run_chain(be, shortcut_, body_.size(), x, mode);
    be.sum(f.data, s.data, y.data, y.count());
  }

  // The chains' backward runs here (backward_params is called for every
  // block, backward_input only when a layer before it trains): both
  // branches' parameter gradients, and what backward_input needs, which the
  // model calls next with the same dy: the gradient w.r.t. the first part's
  // output (adds_in_first_) or the body's input gradient df, left in
  // grad_a_ or grad_b_. A projection shortcut's chain reuses those
  // buffers, so with one the two input gradients are summed here, in dx_.
  void backward_params(Backend& be, ConstTensorView x, ConstTensorView dy) override {
    pending_ = back_chain(be, body_, 0, x, dy, adds_in_first_);
    if (shortcut_.empty()) return;
    be.copy_device(dx_.get(), pending_.data, x.count() * sizeof(float));
    const ConstTensorView ds = back_chain(be, shortcut_, body_.size(), x, dy, false);
    be.add(ds.data, dx_.get(), x.count());
  }

  // dx = df + dy (the identity shortcut's gradient), with its bf16 rounding
  // where the model asks (dx.bf16): the first part's input gradient with dy
  // added (one pass for ln), or the sum of df and dy in one pass; with a
  // projection shortcut the sum backward_params made. A block without
  // parameters gets no backward_params call from the model: its chains
  // run here.
  void backward_input(Backend& be, ConstTensorView x, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    if (!pending_.data) backward_params(be, x, dy);
    if (!shortcut_.empty())
      be.copy_device(dx.data, dx_.get(), x.count() * sizeof(float));
    else if (adds_in_first_)
      body_[0]->backward_input_adding(be, x, output(0, x.rows, *body_[0]), pending_, dx, dy);
    else
      be.sum(pending_.data, dy.data, dx.data, x.count(), dx.bf16);
    pending_ = {};
  }

  bool writes_input_grad_bf16() const override { return shortcut_.empty(); }
  void forward_empty(Backend& be) override {
    for (auto* parts : {&body_, &shortcut_})
      for (const auto& p : *parts)
        if (p->communicates()) p->forward_empty(be);
  }
  // In the order backward_params reaches the parts: the body last part
  // first, then the shortcut's.
  void backward_empty(Backend& be) override {
    for (auto* parts : {&body_, &shortcut_})
      for (std::size_t i = parts->size(); i-- > 0;)
        if ((*parts)[i]->communicates()) (*parts)[i]->backward_empty(be);
  }

 private:
  template <typename F>
  bool any(F f) const {
    return std::any_of(body_.begin(), body_.end(), [&](const auto& p) { return f(*p); }) ||
           std::any_of(shortcut_.begin(), shortcut_.end(), [&](const auto& p) { return f(*p); });
  }

  static void init_chain(const Parts& parts, std::uint64_t seed, bool last_next_rectifies,
                         const ArenaPointers& host) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const bool next = i + 1 < parts.size() ? parts[i + 1]->rectifies() : last_next_rectifies;
      parts[i]->init(seed, next, host);
    }
  }

  // A part's output is kept from forward to backward where a backward
  // reads it: the part's own, or the next part's (whose input it is). The
  // chain's last output (f) is read by no other: the sum's gradient is dy
  // itself. Else it lives for the pass, which the forward's next parts
  // read it in (dense and attn under bf16 keep their input's rounding).
  // A bf16 MLP's first output is kept in bf16 (hidden16_) instead. A part
  // run by the part before (absorbs_) has its output read by that part's
  // backward.
  Lifetime output_lifetime(const Parts& parts, std::size_t first, std::size_t i) const {
    const bool read = !mlp_bf16_[first + i] &&
                      (parts[i]->backward_reads_output() ||
                       (i + 1 < parts.size() && parts[i + 1]->backward_reads_input()) ||
                       (i >= 1 && absorbs_[first + i - 1]));
    return read ? Lifetime::kSaved : Lifetime::kPass;
  }

  // Which parts fold a neighbour into their GEMM (Layer::folds_next,
  // folds_previous), which write their output's bf16 copy when asked
  // (Layer::writes_output_bf16), and which start a bf16 MLP, by part index
  // as acts_ counts them. A bf16 MLP, where the backend rounds GEMM
  // operands: a part that folds the gelu:tanh after it, followed by one
  // that folds it backward and keeps its input's rounding (dense, gelu:tanh,
  // dense): the gelu's input and output and the first dense's output
  // gradient exist in bf16 only (Backend::gemm_epilogue_bf16).
  void note_folds(const Parts& parts, std::size_t first, bool rounds) {
    const std::size_t end = first + parts.size();
    for (auto* v : {&folds_next_, &folds_previous_, &writes_bf16_, &mlp_bf16_, &absorbs_})
      v->resize(end, false);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      writes_bf16_[first + i] = parts[i]->writes_output_bf16();
      folds_next_[first + i] = i + 1 < parts.size() && parts[i]->folds_next(*parts[i + 1]);
      folds_previous_[first + i] = i >= 1 && parts[i]->folds_previous(*parts[i - 1]);
      absorbs_[first + i] = i + 1 < parts.size() && !(i >= 1 && absorbs_[first + i - 1]) &&
                            parts[i]->absorbs_next(*parts[i + 1]);
    }
    for (std::size_t i = 0; i + 2 < parts.size(); ++i)
      mlp_bf16_[first + i] = rounds && folds_next_[first + i] &&
                             parts[i + 2]->folds_previous(*parts[i + 1]) &&
                             !parts[i + 2]->backward_reads_input();
  }

  TensorView output(std::size_t at, int rows, const Layer& l) const {
    return {acts_[at].get(), rows, l.output_shape()};
  }

  // Forward through a chain whose activations start at acts_[first];
  // returns the chain's output. With `adding` (adds_in_last_), the last
  // part writes its output plus x there instead.
  ConstTensorView run_chain(Backend& be, const Parts& parts, std::size_t first, ConstTensorView x,
                            Mode mode, const TensorView* adding = nullptr) {
    ConstTensorView in = x;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (adding && i + 1 == parts.size()) {
        parts[i]->forward_adding(be, in, x, *adding, mode);
        return *adding;
      }
      if (absorbs_[first + i]) {  // this part runs the next: its output is the next's
        const TensorView next = output(first + i + 1, x.rows, *parts[i + 1]);
        parts[i]->forward_absorbing_next(be, in, next, mode);
        in = next;
        ++i;
        continue;
      }
      const TensorView out = output(first + i, x.rows, *parts[i]);
      if (folds_next_[first + i]) {  // this part and the next in one call
        TensorView y = out, next = output(first + i + 1, x.rows, *parts[i + 1]);
        if (mlp_bf16_[first + i]) {  // both in bf16, the next's into the part after it
          y.bf16 = hidden16_[first + i].get();
          next.bf16 = parts[i + 2]->input_bf16();
        }
        parts[i]->forward_folding_next(be, in, y, next, mode);
        in = next;
        ++i;
        continue;
      }
      // The next part's bf16 slot for its input, where this part fills it.
      TensorView y = out;
      if (writes_bf16_[first + i] && i + 1 < parts.size()) y.bf16 = parts[i + 1]->input_bf16();
      parts[i]->forward(be, in, y, mode);
      in = y;
    }
    return in;
  }

  // Backward through a chain from dy; returns the gradient w.r.t. x, in
  // grad_a_ or grad_b_ (the next chain may reuse them once it is copied).
  // stop_at_first: the first part's backward_params only; returns the
  // gradient w.r.t. its output (its input gradient is backward_input's).
  ConstTensorView back_chain(Backend& be, const Parts& parts, std::size_t first, ConstTensorView x,
                             ConstTensorView dy, bool stop_at_first) {
    ConstTensorView g = dy;
    auto input = [&](std::size_t i) {  // part i's input
      return i == 0 ? x : ConstTensorView(output(first + i - 1, x.rows, *parts[i - 1]));
    };
    for (std::size_t i = parts.size(); i-- > 0;) {
      Layer& l = *parts[i];
      if (i >= 1 && absorbs_[first + i - 1]) continue;  // run by part i - 1, with g
      const ConstTensorView in = input(i);
      // g is w.r.t. the next part's output where this part runs it.
      ConstTensorView next_y;
      if (absorbs_[first + i]) next_y = output(first + i + 1, x.rows, *parts[i + 1]);
      if (!l.params().empty()) {
        if (absorbs_[first + i]) l.backward_params_absorbing_next(be, in, next_y, g);
        else l.backward_params(be, in, g);
      }
      if (i == 0 && stop_at_first) break;
      float* free = g.data == grad_a_.get() ? grad_b_.get() : grad_a_.get();
      if (folds_previous_[first + i]) {  // through part i - 1 (no parameters) too
        --i;
        TensorView dx{free, x.rows, parts[i]->input_shape()};
        ConstTensorView prev_x = input(i);
        if (i >= 1 && mlp_bf16_[first + i - 1]) {  // in bf16, dx into the part before's slot
          prev_x.bf16 = hidden16_[first + i - 1].get();
          dx.bf16 = parts[i - 1]->output_grad_bf16();
        }
        l.backward_input_folding_previous(be, in, prev_x, g, dx);
        g = dx;
        continue;
      }
      const TensorView dx{free, x.rows, l.input_shape()};
      if (absorbs_[first + i]) l.backward_input_absorbing_next(be, in, next_y, g, dx);
      else l.backward_input(be, in, output(first + i, x.rows, l), g, dx);
      g = dx;
    }
    return g;
  }

  Parts body_, shortcut_;
  std::vector<ArenaBuffer<float>> acts_;  // each part's output: body's, then the shortcut's
  std::vector<bool> folds_next_, folds_previous_;  // by part, as acts_ (set by allocate)
  std::vector<bool> absorbs_;      // the part runs the next in its passes (note_folds)
  std::vector<bool> writes_bf16_;  // the part writes its output's bf16 copy when asked
  std::vector<bool> mlp_bf16_;     // the part starts a bf16 MLP (note_folds)
  std::vector<ArenaBuffer<std::uint16_t>> hidden16_;  // a bf16 MLP's first output, in bf16
  ArenaBuffer<float> grad_a_, grad_b_, dx_;  // backward only; dx_ with a projection shortcut
  bool adds_in_first_ = false;  // the first part makes df + dy (set by allocate)
  bool adds_in_last_ = false;   // the last part makes f + x (set by allocate)
  // From backward_params to backward_input: the gradient w.r.t. the first
  // part's output (adds_in_first_), else the body's input gradient df;
  // empty (data null) once backward_input has used it.
  ConstTensorView pending_;
};

LayerSpec parse_residual(const std::string& token) {
  if (token.size() < 5 || token.compare(0, 4, "res(") != 0 || token.back() != ')')
    throw BadLayerToken("a block is res(L,...)");
  const std::string inside = token.substr(4, token.size() - 5);
  if (inside.find_first_not_of(" \t") == std::string::npos) throw BadLayerToken("empty block");
  LayerSpec spec{"res", {}, token};
  spec.inner = parse_layer_list(inside, token);
  return spec;
}

std::unique_ptr<Layer> make_residual(const LayerSpec& spec, const LayerContext& ctx) {
  DPT_REQUIRE(ctx.builder, ExitCode::kOther, ctx.name + ": a block needs the model's builder");
  Parts body;
  Shape shape = ctx.input;
  for (const LayerSpec& l : spec.inner) {
    body.push_back(ctx.builder->build(l, shape));
    shape = body.back()->output_shape();
  }
  Parts shortcut;
  if (!(shape == ctx.input)) {
    DPT_REQUIRE(shape.rank() >= 3 && ctx.input.rank() == shape.rank(), ExitCode::kUsage,
                "--model: " + ctx.name + " '" + spec.token + "' maps " + ctx.input.to_string() +
                    " to " + shape.to_string() +
                    "; a projection shortcut needs a spatial output of the input's rank (a "
                    "block over a sequence must keep its shape)");
    const LayerSpec proj{"conv", {std::to_string(shape[0]), "1", std::to_string(total_stride(spec.inner)), "0"},
                         "conv:" + std::to_string(shape[0]) + ":1"};
    shortcut.push_back(ctx.builder->build_named(proj, ctx.input, ctx.name + "/proj", 1000 + ctx.index));
    shortcut.push_back(ctx.builder->build_named(LayerSpec{"bn", {}, "bn"}, shortcut[0]->output_shape(),
                                                ctx.name + "/proj_bn", 1000 + ctx.index));
    DPT_REQUIRE(shortcut.back()->output_shape() == shape, ExitCode::kUsage,
                "--model: " + ctx.name + " '" + spec.token + "': its projection gives " +
                    shortcut.back()->output_shape().to_string() + ", the block " + shape.to_string() +
                    " (use padding that keeps size / stride)");
  }
  return std::make_unique<Residual>(ctx, shape, std::move(body), std::move(shortcut));
}

}  // namespace

LayerFamily residual_family() {
  return {{"res"}, "res(L,...)", parse_residual, make_residual, nullptr, ""};
}

}  // namespace dptrain
