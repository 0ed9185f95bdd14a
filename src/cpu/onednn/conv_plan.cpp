// Implements: the CPU convolution plan (spatial_plans.hpp): oneDNN
// convolution_forward, _backward_data and _backward_weights (with the bias
// gradient) per row count, on plain nchw / ncdhw activations and the torch
// weight layout oihw / oidhw, direct algorithm (Winograd would trade
// accuracy for speed behind the caller's back).
#include <vector>

#include "cpu/onednn/engine.hpp"
#include "cpu/onednn/spatial_plans.hpp"
#include "dptrain/error.hpp"

namespace dptrain::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Everything a pass over one row count needs. The memories are argument
// slots whose data handles are set per call, shared between passes where
// the descriptors agree (x and dx, y and dy, weight and its gradient).
struct ConvPrimitives {
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  memory input, output, weight, bias;
  memory forward_scratch, data_scratch, weights_scratch;
};

class OnednnConvPlan final : public ConvPlan {
 public:
  explicit OnednnConvPlan(const ConvGeometry& g)
      : g_(g), by_rows_(static_cast<std::size_t>(g.max_rows) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "a convolution is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a convolution plan needs max_rows >= 1");
    scratch_.reserve(AlignedBytes::kAlignment);  // never a null handle, even when unused
    primitives(g.max_rows);  // the largest scratchpad exists before the first step
  }

  void forward(const float* x, const float* weight, const float* bias, float* y,
               int rows) override {
    ConvPrimitives& p = primitives(rows);
    p.input.set_data_handle(const_cast<float*>(x));
    p.weight.set_data_handle(const_cast<float*>(weight));
    p.bias.set_data_handle(const_cast<float*>(bias));
    p.output.set_data_handle(y);
    p.forward_scratch.set_data_handle(scratch_.data());
    p.forward.execute(cpu_stream(), {{DNNL_ARG_SRC, p.input},
                                     {DNNL_ARG_WEIGHTS, p.weight},
                                     {DNNL_ARG_BIAS, p.bias},
                                     {DNNL_ARG_DST, p.output},
                                     {DNNL_ARG_SCRATCHPAD, p.forward_scratch}});
    cpu_stream().wait();
  }

  void backward_data(const float* dy, const float* weight, float* dx, int rows) override {
    ConvPrimitives& p = primitives(rows);
    p.output.set_data_handle(const_cast<float*>(dy));
    p.weight.set_data_handle(const_cast<float*>(weight));
    p.input.set_data_handle(dx);
    p.data_scratch.set_data_handle(scratch_.data());
    p.backward_data.execute(cpu_stream(), {{DNNL_ARG_DIFF_DST, p.output},
                                           {DNNL_ARG_WEIGHTS, p.weight},
                                           {DNNL_ARG_DIFF_SRC, p.input},
                                           {DNNL_ARG_SCRATCHPAD, p.data_scratch}});
    cpu_stream().wait();
  }

  void backward_weights(const float* x, const float* dy, float* dweight, float* dbias,
                        int rows) override {
    ConvPrimitives& p = primitives(rows);
    p.input.set_data_handle(const_cast<float*>(x));
    p.output.set_data_handle(const_cast<float*>(dy));
    p.weight.set_data_handle(dweight);
    p.bias.set_data_handle(dbias);
    p.weights_scratch.set_data_handle(scratch_.data());
    p.backward_weights.execute(cpu_stream(), {{DNNL_ARG_SRC, p.input},
                                              {DNNL_ARG_DIFF_DST, p.output},
                                              {DNNL_ARG_DIFF_WEIGHTS, p.weight},
                                              {DNNL_ARG_DIFF_BIAS, p.bias},
                                              {DNNL_ARG_SCRATCHPAD, p.weights_scratch}});
    cpu_stream().wait();
  }

  std::size_t objects_created() const override { return created_; }

 private:
  ConvPrimitives& primitives(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "convolution over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) slot = create(rows);
    return *slot;
  }

  memory::desc weight_desc() const {
    memory::dims dims{g_.out_channels, g_.in_channels};
    for (auto k : spatial_dims(g_.dims, g_.kernel)) dims.push_back(k);
    return {dims, memory::data_type::f32, g_.dims == 2 ? tag::oihw : tag::oidhw};
  }

  memory make_memory(const memory::desc& md) {
    ++created_;
    return memory(md, cpu_engine(), DNNL_MEMORY_NONE);
  }

  std::unique_ptr<ConvPrimitives> create(int rows) {
    const dnnl::engine& eng = cpu_engine();
    const memory::desc x_md = activation_desc(rows, g_.in_channels, g_.dims, g_.input);
    const memory::desc y_md = activation_desc(rows, g_.out_channels, g_.dims, g_.output);
    const memory::desc w_md = weight_desc();
    const memory::desc b_md({g_.out_channels}, memory::data_type::f32, tag::x);
    const memory::dims strides = spatial_dims(g_.dims, g_.stride);
    // Padding on the high side as on the low one, as torch pads: oneDNN
    // floors (in + 2p - k) / s like torch, so windows past the end drop.
    const memory::dims pad = spatial_dims(g_.dims, g_.padding);
    const auto algo = dnnl::algorithm::convolution_direct;
    const dnnl::primitive_attr attr = user_scratchpad();

    const dnnl::convolution_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, algo, x_md, w_md, b_md, y_md, strides, pad, pad},
        attr, eng);
    const dnnl::convolution_backward_data::primitive_desc bwd_data(
        {algo, x_md, w_md, y_md, strides, pad, pad}, attr, eng, fwd);
    const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
        {algo, x_md, w_md, b_md, y_md, strides, pad, pad}, attr, eng, fwd);

    auto p = std::make_unique<ConvPrimitives>();
    p->forward = dnnl::convolution_forward(fwd);
    p->backward_data = dnnl::convolution_backward_data(bwd_data);
    p->backward_weights = dnnl::convolution_backward_weights(bwd_weights);
    created_ += 3;
    p->input = make_memory(x_md);
    p->output = make_memory(y_md);
    p->weight = make_memory(w_md);
    p->bias = make_memory(b_md);
    p->forward_scratch = make_memory(fwd.scratchpad_desc());
    p->data_scratch = make_memory(bwd_data.scratchpad_desc());
    p->weights_scratch = make_memory(bwd_weights.scratchpad_desc());
    // One scratchpad serves every pass: they never run at once.
    for (const auto& md :
         {fwd.scratchpad_desc(), bwd_data.scratchpad_desc(), bwd_weights.scratchpad_desc()})
      scratch_.reserve(md.get_size());
    return p;
  }

  ConvGeometry g_;
  std::vector<std::unique_ptr<ConvPrimitives>> by_rows_;  // [rows], made on first use
  AlignedBytes scratch_;
  std::size_t created_ = 0;
};

}  // namespace

std::unique_ptr<ConvPlan> make_conv_plan(const ConvGeometry& g) {
  return std::make_unique<OnednnConvPlan>(g);
}

memory::dims spatial_dims(int dims, const SpatialExtent& e) {
  return memory::dims(e.begin(), e.begin() + dims);
}

memory::desc activation_desc(int rows, int channels, int dims, const SpatialExtent& e) {
  memory::dims shape{rows, channels};
  for (auto d : spatial_dims(dims, e)) shape.push_back(d);
  return {shape, memory::data_type::f32, dims == 2 ? tag::nchw : tag::ncdhw};
}

}  // namespace dptrain::onednn
