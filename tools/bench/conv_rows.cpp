// Implements: the conv rows of dptrain_cnn_bench (cnn_bench.hpp): each conv
// layer of a model, pass by pass, through the layer (its ConvPlan: plain
// nchw / oihw tensors in and out, reorders to oneDNN's layouts inside)
// against one bare oneDNN convolution primitive of the same shapes, created
// once with every tensor in the layout oneDNN picks (format_tag::any), its
// operands made once in those layouts. Only the passes a training step runs
// (the first layer with parameters gets no backward_data), each after the
// passes that come before it in a step (untimed), as in training: the plan
// may reuse what they made of the same input.
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <random>
#include <unordered_map>

#include "backends/cpu/onednn/engine.hpp"
#include "cnn_bench.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain::bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class Pass { kForward, kBackwardData, kBackwardWeights };
constexpr const char* kPassNames[] = {"forward", "backward_data", "backward_weights"};

// The conv layer's arguments from its canonical spec "conv:C:K[:S[:P]]".
struct ConvShape {
  memory::dims src, weights, bias, dst, strides, padding;
};

ConvShape conv_shape(const Layer& layer, int rows) {
  std::vector<int> a;
  const std::string spec = layer.spec();
  for (std::size_t p = spec.find(':'); p != std::string::npos; p = spec.find(':', p + 1))
    a.push_back(std::stoi(spec.substr(p + 1)));
  const int kernel = a.at(1), stride = a.size() > 2 ? a[2] : 1;
  const int padding = a.size() > 3 ? a[3] : (kernel - 1) / 2;
  const Shape& in = layer.input_shape();
  const Shape& out = layer.output_shape();
  ConvShape s;
  s.src = {rows, in[0]};
  s.weights = {out[0], in[0]};
  s.bias = {out[0]};
  s.dst = {rows, out[0]};
  for (int d = 1; d < in.rank(); ++d) {
    s.src.push_back(in[d]);
    s.dst.push_back(out[d]);
    s.weights.push_back(kernel);
    s.strides.push_back(stride);
    s.padding.push_back(padding);
  }
  return s;
}

// One bare primitive with its arguments, all made once.
struct BarePass {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
};

memory filled(const memory::desc& md, std::mt19937& rng) {
  memory m(md, onednn::cpu_engine());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto* p = static_cast<float*>(m.get_data_handle());
  for (std::size_t i = 0; i < md.get_size() / sizeof(float); ++i) p[i] = u(rng);
  return m;
}

BarePass bare_pass(const ConvShape& s, Pass pass, std::mt19937& rng) {
  const dnnl::engine& eng = onednn::cpu_engine();
  auto any = [](const memory::dims& d) {
    return memory::desc(d, memory::data_type::f32, tag::any);
  };
  const memory::desc bias(s.bias, memory::data_type::f32, tag::x);
  const auto algo = dnnl::algorithm::convolution_direct;  // as the plan: no Winograd
  dnnl::primitive_attr attr;  // the plan's scratchpad mode: the caller's buffer
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::convolution_forward::primitive_desc fwd(
      {dnnl::prop_kind::forward_training, algo, any(s.src), any(s.weights), bias, any(s.dst),
       s.strides, s.padding, s.padding},
      attr, eng);
  BarePass b;
  auto add = [&](int id, const memory::desc& md) { b.args.emplace(id, filled(md, rng)); };
  if (pass == Pass::kForward) {
    b.primitive = dnnl::convolution_forward(fwd);
    add(DNNL_ARG_SRC, fwd.src_desc());
    add(DNNL_ARG_WEIGHTS, fwd.weights_desc());
    add(DNNL_ARG_BIAS, bias);
    add(DNNL_ARG_DST, fwd.dst_desc());
    add(DNNL_ARG_SCRATCHPAD, fwd.scratchpad_desc());
  } else if (pass == Pass::kBackwardData) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        {algo, any(s.src), any(s.weights), any(s.dst), s.strides, s.padding, s.padding}, attr,
        eng, fwd);
    b.primitive = dnnl::convolution_backward_data(pd);
    add(DNNL_ARG_DIFF_DST, pd.diff_dst_desc());
    add(DNNL_ARG_WEIGHTS, pd.weights_desc());
    add(DNNL_ARG_DIFF_SRC, pd.diff_src_desc());
    add(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
  } else {
    const dnnl::convolution_backward_weights::primitive_desc pd(
        {algo, any(s.src), any(s.weights), bias, any(s.dst), s.strides, s.padding, s.padding},
        attr, eng, fwd);
    b.primitive = dnnl::convolution_backward_weights(pd);
    add(DNNL_ARG_SRC, pd.src_desc());
    add(DNNL_ARG_DIFF_DST, pd.diff_dst_desc());
    add(DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc());
    add(DNNL_ARG_DIFF_BIAS, bias);
    add(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
  }
  return b;
}

std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// "conv1 forward vs bare oneDNN (32 -> 64 channels, 14x14, batch 128)"
std::string row_name(const Layer& layer, Pass pass, int batch) {
  const Shape& in = layer.input_shape();
  std::string extent = std::to_string(in[1]);
  for (int d = 2; d < in.rank(); ++d) extent.append("x").append(std::to_string(in[d]));
  return layer.name() + " " + kPassNames[static_cast<int>(pass)] + " vs bare oneDNN (" +
         std::to_string(in[0]) + " -> " + std::to_string(layer.output_shape()[0]) +
         " channels, " + extent + ", batch " + std::to_string(batch) + ")";
}

// The layer's pass against the bare primitive, alternating, on this rank.
Row conv_pass_row(Backend& be, Layer& layer, Pass pass, const CnnArgs& args, std::mt19937& rng) {
  const int rows = args.batch;
  const Shape& in = layer.input_shape();
  const Shape& out = layer.output_shape();
  const std::size_t in_n = rows * in.size(), out_n = rows * out.size();
  std::vector<float> x = random_values(in_n, rng), dx(in_n), y(out_n),
                     dy = random_values(out_n, rng);
  const ConstTensorView xv(x.data(), rows, in), yv(y.data(), rows, out), dyv(dy.data(), rows, out);
  const TensorView yw(y.data(), rows, out), dxw(dx.data(), rows, in);
  layer.forward(be, xv, yw, Mode::kTrain);  // y for backward_input, and the plan made
  auto earlier_passes = [&, pass] {  // a step: forward, backward_weights, backward_data
    if (pass != Pass::kForward) layer.forward(be, xv, yw, Mode::kTrain);
    if (pass == Pass::kBackwardData) layer.backward_params(be, xv, dyv);
    be.synchronize();
  };
  const Side ours{earlier_passes, [&] {
                    const auto t0 = Clock::now();
                    if (pass == Pass::kForward)
                      layer.forward(be, xv, yw, Mode::kTrain);
                    else if (pass == Pass::kBackwardData)
                      layer.backward_input(be, xv, yv, dyv, dxw);
                    else
                      layer.backward_params(be, xv, dyv);
                    be.synchronize();
                    return ms_since(t0);
                  }};
  BarePass bare = bare_pass(conv_shape(layer, rows), pass, rng);
  const Side base{nullptr, [&] {
                    const auto t0 = Clock::now();
                    bare.primitive.execute(onednn::cpu_stream(), bare.args);
                    onednn::cpu_stream().wait();
                    return ms_since(t0);
                  }};
  const Samples s = alternate(MPI_COMM_SELF, args.repeats, {5, 2.0, 10, 2000}, ours, base);
  return make_row(row_name(layer, pass, rows), s, ours_over_base, "<= 1.15",
                  "ours = " + layer.name() + " (" + layer.spec() + ") through the layer (its "
                  "ConvPlan: plain nchw/oihw tensors, reorders to and from oneDNN's layouts "
                  "included), after the step's earlier passes (untimed); baseline = one " + onednn::version() +
                      " convolution primitive (direct) of the same shapes, every tensor in the "
                      "layout oneDNN picks, created once; 1 rank, " +
                      plural(args.threads, "thread") + "; ratio = ours / baseline");
}

}  // namespace

std::vector<Row> conv_rows(const CnnArgs& args) {
  auto be = make_backend("cpu", BackendOptions{args.threads});
  std::vector<std::unique_ptr<Layer>> layers =
      build_layers(parse_model_spec(args.model), args.input);
  std::vector<Layer*> convs;
  bool first_trained = true;  // the model runs no backward_data for it
  std::vector<bool> skip_data;
  for (auto& l : layers) {
    if (l->spec().rfind("conv:", 0) == 0) {
      convs.push_back(l.get());
      skip_data.push_back(first_trained);
    }
    if (!l->params().empty()) first_trained = false;
  }
  Model model(*be, std::move(layers), args.input, args.batch);  // allocates and binds them
  model.init(1);
  std::mt19937 rng(11);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < convs.size(); ++i)
    for (Pass p : {Pass::kForward, Pass::kBackwardData, Pass::kBackwardWeights})
      if (p != Pass::kBackwardData || !skip_data[i])
        rows.push_back(conv_pass_row(*be, *convs[i], p, args, rng));
  return rows;
}

}  // namespace dptrain::bench
