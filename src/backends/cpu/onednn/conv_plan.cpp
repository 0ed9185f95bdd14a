// Implements: the CPU convolution plan (spatial_plans.hpp): oneDNN
// convolution_forward, _backward_data and _backward_weights (with the bias
// gradient) per row count, direct algorithm (Winograd would trade accuracy
// for speed behind the caller's back). The layers exchange plain nchw /
// ncdhw activations and torch's oihw / oidhw weights. From kBlockedFrom
// input channels on, each pass runs in the layouts oneDNN prefers (blocked
// channels, e.g. nChw8c on AVX2), with reorders of its operands into
// plan-owned buffers and of its result back: measured on AVX2 at batch 64,
// 32 -> 32 channels on 28x28 takes 38 ms per forward + backward blocked
// (reorders 2 ms more) against 91 ms plain (im2col + GEMM); with one input
// channel the plain GEMM path is the faster. A step converts x and dy once
// each: backward_weights takes forward's blocked x, and backward_data
// backward_weights' blocked dy, when they are the same tensors (address and
// rows) right after (ConvPlan's contract), saving two of the layer's seven
// reorders (about 2 ms of 50 in the Fashion-MNIST CNN's second conv).
#include <array>
#include <vector>

#include "backends/cpu/onednn/engine.hpp"
#include "backends/cpu/onednn/spatial_plans.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

constexpr int kBlockedFrom = 8;  // input channels

// One primitive with two tensor inputs, one tensor output and optionally
// the bias (an input of forward, an output of backward_weights).
struct Pass {
  dnnl::primitive primitive;
  std::array<Operand, 3> operands;  // inputs 0 and 1, output 2
  std::array<AlignedBytes*, 3> buffers{};  // where each reordered operand lives
  memory bias, scratch;
  std::vector<dnnl_exec_arg_t> args;
};

// What a plan-owned buffer holds: the conversion of the caller's tensor at
// `data` (over `rows` rows) into `layout`, or nothing (data null).
struct Held {
  const void* data = nullptr;
  int rows = 0;
  memory::desc layout;

  static Held of(const Operand& o, const void* data, int rows) {
    return o.reordered ? Held{data, rows, o.inner.get_desc()} : Held{};
  }
  bool holds(const Operand& o, const void* d, int r) const {
    return data && o.reordered && data == d && rows == r && layout == o.inner.get_desc();
  }
};

class OnednnConvPlan final : public ConvPlan {
 public:
  explicit OnednnConvPlan(const ConvGeometry& g)
      : g_(g), by_rows_(static_cast<std::size_t>(g.max_rows) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "a convolution is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a convolution plan needs max_rows >= 1");
    scratch_.reserve(AlignedBytes::kAlignment);  // never a null handle, even when unused
    for (AlignedBytes* b : {&x_buffer_, &dy_buffer_, &weight_buffer_, &output_buffer_})
      b->reserve(AlignedBytes::kAlignment);
    passes(g.max_rows);  // the largest buffers exist before the first step
  }

  // The CPU reads the fp32 operands (its bf16 primitives round inside).
  void forward(GemmOperand xo, GemmOperand weight, const float* bias, float* y,
               int rows) override {
    const float* x = xo.data;
    Pass& p = passes(rows)[0];
    run(p, x, weight.data, y, const_cast<float*>(bias), false);
    x_held_ = Held::of(p.operands[0], x, rows);
  }
  void backward_data(GemmOperand dyo, GemmOperand weight, float* dx, int rows) override {
    const float* dy = dyo.data;
    Pass& p = passes(rows)[1];
    run(p, dy, weight.data, dx, nullptr, dy_held_.holds(p.operands[0], dy, rows));
    dy_held_ = {};  // once: a later call may bring new values at the same address
  }
  void backward_weights(GemmOperand xo, GemmOperand dyo, float* dweight, float* dbias,
                        int rows) override {
    const float *x = xo.data, *dy = dyo.data;
    Pass& p = passes(rows)[2];
    run(p, x, dy, dweight, dbias, x_held_.holds(p.operands[0], x, rows));
    x_held_ = {};
    dy_held_ = Held::of(p.operands[1], dy, rows);
  }

  std::size_t objects_created() const override { return created_; }

 private:
  using Passes = std::array<Pass, 3>;  // forward, backward_data, backward_weights

  Passes& passes(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "convolution over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) {
      slot = create(rows);
      x_held_ = dy_held_ = {};  // a buffer that grew lost what it held
    }
    return *slot;
  }

  // in0_held: input 0's buffer holds its conversion already (no reorder).
  void run(Pass& p, const float* in0, const float* in1, float* out, float* bias, bool in0_held) {
    if (in0_held)
      bind_converted(p.operands[0], in0, *p.buffers[0]);
    else
      bind(p.operands[0], in0, *p.buffers[0]);
    bind(p.operands[1], in1, *p.buffers[1]);
    bind(p.operands[2], out, *p.buffers[2]);
    if (bias) p.bias.set_data_handle(bias);
    p.scratch.set_data_handle(scratch_.data());
    execute(p.primitive, p.args);
    store(p.operands[2]);
    cpu_stream().wait();
  }

  memory make_memory(const memory::desc& md) {
    ++created_;
    return memory(md, cpu_engine(), DNNL_MEMORY_NONE);
  }

  // Operand `slot` of p (2: the output), reordered (when it is) in `buffer`.
  void add_operand(Pass& p, int slot, const memory::desc& plain, const memory::desc& wanted,
                   AlignedBytes& buffer) {
    p.operands[slot] = onednn::make_operand(plain, wanted, slot == 2, buffer, created_);
    p.buffers[slot] = &buffer;
  }

  // Arguments of p: its operands under the ids given, then bias and scratchpad.
  void finish(Pass& p, const dnnl::primitive_desc_base& pd, std::array<int, 3> ids, int bias_id) {
    for (int i = 0; i < 3; ++i) p.args.push_back({ids[i], p.operands[i].inner.get()});
    if (bias_id) {
      p.bias = make_memory(bias_desc());
      p.args.push_back({bias_id, p.bias.get()});
    }
    p.scratch = make_memory(pd.scratchpad_desc());
    p.args.push_back({DNNL_ARG_SCRATCHPAD, p.scratch.get()});
    scratch_.reserve(pd.scratchpad_desc().get_size());
    ++created_;  // the primitive
  }

  memory::desc weight_desc(tag layout) const {
    memory::dims dims{g_.out_channels, g_.in_channels};
    for (auto k : spatial_dims(g_.dims, g_.kernel)) dims.push_back(k);
    return {dims, memory::data_type::f32, layout};
  }
  memory::desc bias_desc() const { return {{g_.out_channels}, memory::data_type::f32, tag::x}; }

  std::unique_ptr<Passes> create(int rows);

  ConvGeometry g_;
  std::vector<std::unique_ptr<Passes>> by_rows_;  // [rows], made on first use
  // The reordered operands, by tensor: x and dy keep theirs from one pass
  // to the next (x_held_, dy_held_); passes never run at once, so the
  // weights and the outputs of all passes share one buffer each, and the
  // scratchpad.
  AlignedBytes x_buffer_, dy_buffer_, weight_buffer_, output_buffer_;
  Held x_held_, dy_held_;
  AlignedBytes scratch_;
  std::size_t created_ = 0;
};

std::unique_ptr<OnednnConvPlan::Passes> OnednnConvPlan::create(int rows) {
  const dnnl::engine& eng = cpu_engine();
  const memory::desc x = activation_desc(rows, g_.in_channels, g_.dims, g_.input);
  const memory::desc y = activation_desc(rows, g_.out_channels, g_.dims, g_.output);
  const memory::desc w = weight_desc(g_.dims == 2 ? tag::oihw : tag::oidhw);
  const bool blocked = g_.in_channels >= kBlockedFrom;
  const memory::desc x_any = blocked ? memory::desc(x.dims(), x.data_type(), tag::any) : x;
  const memory::desc y_any = blocked ? memory::desc(y.dims(), y.data_type(), tag::any) : y;
  const memory::desc w_any = blocked ? weight_desc(tag::any) : w;
  const memory::dims strides = spatial_dims(g_.dims, g_.stride);
  // Padding on the high side as on the low one, as torch pads: oneDNN
  // floors (in + 2p - k) / s like torch, so windows past the end drop.
  const memory::dims pad = spatial_dims(g_.dims, g_.padding);
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::primitive_attr attr = user_scratchpad();

  const dnnl::convolution_forward::primitive_desc fwd(
      {dnnl::prop_kind::forward_training, algo, x_any, w_any, bias_desc(), y_any, strides, pad,
       pad},
      attr, eng);
  const dnnl::convolution_backward_data::primitive_desc bwd_data(
      {algo, x_any, w_any, y_any, strides, pad, pad}, attr, eng, fwd);
  const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
      {algo, x_any, w_any, bias_desc(), y_any, strides, pad, pad}, attr, eng, fwd);

  auto passes = std::make_unique<Passes>();
  Pass& f = (*passes)[0];
  f.primitive = dnnl::convolution_forward(fwd);
  add_operand(f, 0, x, fwd.src_desc(), x_buffer_);
  add_operand(f, 1, w, fwd.weights_desc(), weight_buffer_);
  add_operand(f, 2, y, fwd.dst_desc(), output_buffer_);
  finish(f, fwd, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, DNNL_ARG_BIAS);

  Pass& d = (*passes)[1];
  d.primitive = dnnl::convolution_backward_data(bwd_data);
  add_operand(d, 0, y, bwd_data.diff_dst_desc(), dy_buffer_);
  add_operand(d, 1, w, bwd_data.weights_desc(), weight_buffer_);
  add_operand(d, 2, x, bwd_data.diff_src_desc(), output_buffer_);
  finish(d, bwd_data, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}, 0);

  Pass& b = (*passes)[2];
  b.primitive = dnnl::convolution_backward_weights(bwd_weights);
  add_operand(b, 0, x, bwd_weights.src_desc(), x_buffer_);
  add_operand(b, 1, y, bwd_weights.diff_dst_desc(), dy_buffer_);
  add_operand(b, 2, w, bwd_weights.diff_weights_desc(), output_buffer_);
  finish(b, bwd_weights, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
         DNNL_ARG_DIFF_BIAS);
  return passes;
}

}  // namespace

std::unique_ptr<ConvPlan> make_conv_plan(const ConvGeometry& g) {
  return std::make_unique<OnednnConvPlan>(g);
}

}  // namespace dptrain::onednn
