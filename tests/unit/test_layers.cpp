// Implements: unit tests of the layer registry (each family parses, unknown
// tokens fail naming themselves), the backend-free layout functions, sample
// shapes through a model, and the buffer arena: a test-only layer that owns
// a buffer, saves scratch space at build time and behaves differently in
// eval, its buffer initialized, updated, and written to and read from a
// checkpoint.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "app/inspect.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "checkpoint_fixtures.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

using Args = std::vector<std::string>;

TEST(LayerRegistry, EachFamilyParses) {
  const auto specs = parse_model_spec("dense:7,relu,tanh,gelu,sigmoid,dense:3");
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[0].kind, "dense");
  EXPECT_EQ(specs[0].args, Args{"7"});
  const char* activations[] = {"relu", "tanh", "gelu", "sigmoid"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(specs[1 + i].kind, activations[i]);
    EXPECT_TRUE(specs[1 + i].args.empty());
  }
  // Arguments are canonical: "dense:007" is dense:7 (and Model::spec says so).
  EXPECT_EQ(parse_model_spec("dense:007")[0].args, Args{"7"});
  EXPECT_EQ(parse_model_spec("dense:007")[0].token, "dense:007");
}

// gelu:tanh is a gelu with the argument tanh (it counts among the gelu
// layers), builds the tanh form, and the model's spec spells it back; any
// other argument is refused.
TEST(LayerRegistry, GeluTanhIsAGeluWithAnArgument) {
  const auto specs = parse_model_spec("dense:4,gelu:tanh,gelu,dense:2");
  EXPECT_EQ(specs[1].kind, "gelu");
  EXPECT_EQ(specs[1].args, Args{"tanh"});
  EXPECT_EQ(specs[2].kind, "gelu");
  EXPECT_TRUE(specs[2].args.empty());
  const auto layers = build_layers(specs, Shape{3});
  EXPECT_EQ(layers[1]->spec(), "gelu:tanh");
  EXPECT_EQ(layers[2]->spec(), "gelu");
  EXPECT_THROW(parse_model_spec("dense:4,gelu:erf,dense:2"), Error);
  EXPECT_THROW(parse_model_spec("dense:4,relu:tanh,dense:2"), Error);
}

TEST(LayerRegistry, UnknownOrMalformedTokensNameThemselves) {
  struct Case {
    const char* spec;
    std::vector<std::string> parts;  // all in the message
  };
  const Case cases[] = {
      {"swish:3,dense:2", {"bad layer 'swish:3'", "valid layers: dense:N (N >= 1), relu"}},
      {"relu:2,dense:2", {"bad layer 'relu:2'"}},
      {"dense:2:3", {"bad layer 'dense:2:3'", "(width must be an integer)"}},
      {"dense:0", {"bad layer 'dense:0'", "(width must be >= 1)"}},
      {"dense:4,tanh", {"the last layer of 'dense:4,tanh' must be dense:N"}},
  };
  for (const Case& c : cases) {
    try {
      parse_model_spec(c.spec);
      ADD_FAILURE() << "accepted " << c.spec;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      for (const auto& p : c.parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  // A hand-made spec of no family cannot be built either.
  EXPECT_THROW(build_layers({{"swish", {}, "swish"}}, Shape{4}), Error);
}

TEST(LayerRegistry, LayoutAndWidthsWithoutABackend) {
  const auto specs = parse_model_spec("dense:6,relu,dense:4,gelu,dense:2");
  const ModelLayout layout = model_layout(specs, Shape{3});
  const std::vector<ParamInfo> want = {{"dense0", "weight", {6, 3}, 0, 18},
                                       {"dense0", "bias", {6}, 18, 6},
                                       {"dense1", "weight", {4, 6}, 24, 24},
                                       {"dense1", "bias", {4}, 48, 4},
                                       {"dense2", "weight", {2, 4}, 52, 8},
                                       {"dense2", "bias", {2}, 60, 2}};
  EXPECT_EQ(layout.params, want);
  EXPECT_TRUE(layout.buffers.empty());
  EXPECT_EQ(layout.output, Shape{2});
  EXPECT_EQ(output_width(specs, Shape{3}), 2);
  EXPECT_EQ(spec_output_width(specs), 2);
  EXPECT_EQ(layer_begins(layout.params), (std::vector<std::size_t>{0, 24, 52}));
  EXPECT_EQ(arena_size(layout.params), 62u);

  auto be = make_cpu_backend(BackendOptions{});
  Model m(*be, specs, 3, 1);
  EXPECT_EQ(m.param_layout(), layout.params);
  // <i> counts the layers of one kind: the activations do not shift it.
  EXPECT_EQ(m.layer(1).name(), "relu0");
  EXPECT_EQ(m.layer(2).name(), "dense1");
}

TEST(LayerShapes, SpatialInputFlowsThroughAndDenseFlattensIt) {
  auto be = make_cpu_backend(BackendOptions{});
  const int rows = 3;
  Model spatial(*be, parse_model_spec("tanh,dense:5,relu,dense:2"), Shape{2, 3, 4}, rows);
  Model flat(*be, parse_model_spec("tanh,dense:5,relu,dense:2"), 24, rows);
  EXPECT_EQ(spatial.input_shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(spatial.input_dim(), 24);
  EXPECT_EQ(spatial.layer(0).output_shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(spatial.layer(1).input_shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(spatial.layer(1).output_shape(), Shape{5});
  EXPECT_EQ(spatial.output_shape(), Shape{2});
  EXPECT_EQ(spatial.param_layout()[0].shape, (std::vector<std::size_t>{5, 24}));
  EXPECT_EQ(spatial.param_layout(), flat.param_layout());

  spatial.init(4);
  flat.init(4);
  std::vector<float> x(rows * 24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.05f * static_cast<float>(i % 17) - 0.4f;
  const float* ys = spatial.forward(x.data(), rows);
  const float* yf = flat.forward(x.data(), rows);
  EXPECT_EQ(std::memcmp(ys, yf, rows * 2 * sizeof(float)), 0);
  be->fill(spatial.output_grad(), 0.5f, rows * 2);
  be->fill(flat.output_grad(), 0.5f, rows * 2);
  spatial.backward(x.data(), spatial.output_grad(), rows);
  flat.backward(x.data(), flat.output_grad(), rows);
  EXPECT_EQ(std::memcmp(spatial.grads(), flat.grads(), flat.num_params() * sizeof(float)), 0);
}

// Identity in both directions; in training it adds each batch's column
// sums to its buffer "sum" (which init sets to 1), in eval it leaves it.
class ColumnSum final : public Layer {
 public:
  explicit ColumnSum(const LayerContext& ctx) : Layer(ctx, ctx.input), width_(ctx.input.size()) {
    sum_ = add_buffer("sum", {width_});
  }
  std::string spec() const override { return "colsum"; }
  bool differs_in_eval() const override { return true; }
  void allocate(Backend& be, int) override { batch_sum_ = DeviceBuffer<float>(be, width_); }
  void init(std::uint64_t, bool, const ArenaPointers& host) const override {
    for (std::size_t i = 0; i < width_; ++i) host.buffers[sum_ + i] = 1.0f;
  }
  void forward(Backend& be, ConstTensorView x, TensorView y, Mode mode) override {
    be.copy_device(y.data, x.data, x.count() * sizeof(float));
    if (mode == Mode::kEval) return;
    be.kernels<DenseKernels>().bias_grad(x.data, batch_sum_.get(), x.rows, x.row_width());
    be.kernels<DenseKernels>().add_bias(arenas().buffers + sum_, batch_sum_.get(), 1,
                                        x.row_width());
  }
  void backward_input(Backend& be, ConstTensorView, ConstTensorView, ConstTensorView dy,
                      TensorView dx) override {
    be.copy_device(dx.data, dy.data, dy.count() * sizeof(float));
  }

 private:
  std::size_t width_, sum_;
  DeviceBuffer<float> batch_sum_;  // saved at build time, so a step never allocates
};

// dense:4, colsum, dense:3 on inputs of width 2.
std::unique_ptr<Model> model_with_buffer(Backend& be, int rows) {
  std::vector<std::unique_ptr<Layer>> layers = build_layers(parse_model_spec("dense:4"), Shape{2});
  LayerContext ctx;
  ctx.input = Shape{4};
  ctx.name = "colsum0";
  layers.push_back(std::make_unique<ColumnSum>(ctx));
  ctx.name = "dense1";
  ctx.index = 1;
  ctx.param_offset = arena_size(layers[0]->params());
  layers.push_back(make_layer(parse_model_spec("dense:3")[0], ctx));
  return std::make_unique<Model>(be, std::move(layers), Shape{2}, rows);
}

TEST(LayerBuffers, LiveInTheBufferArenaAndFollowTheMode) {
  auto be = make_cpu_backend(BackendOptions{});
  const int rows = 2;
  auto m = model_with_buffer(*be, rows);
  const std::vector<ParamInfo> want = {{"colsum0", "sum", {4}, 0, 4}};
  EXPECT_EQ(m->buffer_layout(), want);
  EXPECT_EQ(m->num_buffers(), 4u);
  EXPECT_EQ(m->spec(), "dense:4,colsum,dense:3");
  m->init(9);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(m->buffers()[i], 1.0f);

  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  m->forward(x.data(), rows);
  std::vector<float> h(m->buffers(), m->buffers() + 4);  // 1 + column sums of dense0's output
  m->forward(x.data(), rows, nullptr, Mode::kEval);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(m->buffers()[i], h[i]) << "eval changed it";
  m->forward(x.data(), rows);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(m->buffers()[i] - 1.0f, 2 * (h[i] - 1.0f));

  // Identity in backward too: gradients are those of dense:4,dense:3.
  Model plain(*be, parse_model_spec("dense:4,dense:3"), 2, rows);
  plain.init(9);
  EXPECT_EQ(std::memcmp(plain.params(), m->params(), m->num_params() * sizeof(float)), 0);
  plain.forward(x.data(), rows);
  be->fill(m->output_grad(), 0.25f, rows * 3);
  be->fill(plain.output_grad(), 0.25f, rows * 3);
  m->backward(x.data(), m->output_grad(), rows);
  plain.backward(x.data(), plain.output_grad(), rows);
  EXPECT_EQ(std::memcmp(plain.grads(), m->grads(), m->num_params() * sizeof(float)), 0);
}

TEST(LayerBuffers, RoundTripThroughACheckpoint) {
  auto be = make_cpu_backend(BackendOptions{});
  auto m = model_with_buffer(*be, 2);
  m->init(3);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  m->forward(x.data(), 2);

  CheckpointData d;  // no model attribute: no spec knows colsum
  d.meta.loss = "xent";
  d.meta.optimizer = "sgd";
  d.param_layout = m->param_layout();
  d.params.assign(m->params(), m->params() + m->num_params());
  d.buffer_layout = m->buffer_layout();
  d.buffers.assign(m->buffers(), m->buffers() + m->num_buffers());
  d.has_training_state = true;
  const std::string file = testing::scratch_dir("layers") + "/buffers.h5";
  write_checkpoint(file, d);

  const CheckpointData back = read_checkpoint(file);
  EXPECT_EQ(back.buffer_layout, m->buffer_layout());
  EXPECT_TRUE(testing::bitwise_equal(back.buffers, d.buffers));
  EXPECT_TRUE(testing::bitwise_equal(back.params, d.params));
  EXPECT_NO_THROW(check_layout(back, m->param_layout(), m->buffer_layout(), file));
  testing::expect_ckpt_error([&] { check_layout(back, m->param_layout(), {}, file); },
                             {"checkpoint has 1 colsum layers with buffers, the model has 0"});

  std::ostringstream out;
  inspect_file(file, out);
  EXPECT_NE(out.str().find("buffers:"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("sum [4]"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("buffer values:   4"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace dptrain
