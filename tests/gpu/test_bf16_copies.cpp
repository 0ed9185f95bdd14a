// Implements: bf16 copies written by the kernel that writes the tensor,
// for the next GEMM to read (under --precision bf16 on CUDA), in place of a
// rounding pass of the consumer's own: the loss's gradient for the last
// dense layer (LossKernels' bf16 copy, Model::output_grad_bf16), a layer
// norm's output (SequenceKernels::layer_norm's y_bf16, which a block hands
// to the next part's slot, Layer::input_bf16), a block's input gradient
// (Backend::sum's y16, which the model hands to the block before as its
// dy); and a convolution plan reading the copies the conv layer hands it
// (ConvPlan's GemmOperands).
//
// Checked here: each copy is the rounding of what its kernel wrote, bit
// for bit (the loss in place and apart), on the GPU and the CPU; the model
// offers a slot only where its last layer rounds dy (a dense layer under
// bf16 on CUDA); a step with the loss's copy ends with the gradients of a
// step without it, bit for bit; and the consumers read the copy they are
// given — a copy of 2·dy (or 2·x, 2·w) doubles the gradients exactly (a
// power of two scales each bf16 product and fp32 sum exactly), which a
// consumer that rounded the fp32 values again would not.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/model/model.hpp"
#include "gpu_env.hpp"
#include "spatial_support.hpp"
#include "training_support.hpp"

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::LossKernels;
using dptrain::Model;
using dptrain::Precision;
using gpu_test::download;
using gpu_test::upload;

using gpu_test::is_bf16_rounding;
using gpu_test::kNotWritten;

// Both loss kernels on `be`, apart and in place, for every width class of
// the fused classifier (a warp, 128 and 512 threads a row).
void expect_copies_are_roundings(Backend& be) {
  LossKernels& loss = be.kernels<LossKernels>();
  for (auto [rows, cols] : {std::pair{7, 10}, std::pair{5, 3000}, std::pair{3, 20000}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const std::size_t n = std::size_t(rows) * cols;
    const auto z = gpu_test::random_vector(n, 5, -4.0f, 4.0f);
    std::vector<std::int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7919) % cols;
    auto dz = upload(be, z);
    auto dl = upload(be, labels);
    auto targets = upload(be, gpu_test::random_vector(n, 6));
    auto stats = upload(be, std::vector<float>{0.0f, 0.0f});
    DeviceBuffer<float> d(be, n);
    auto d16 = upload(be, std::vector<std::uint16_t>(n, kNotWritten));
    loss.softmax_xent(dz.get(), dl.get(), rows, cols, 0.25f, d.get(), d16.get(), stats.get());
    EXPECT_TRUE(is_bf16_rounding(download(be, d16), download(be, d))) << "xent";
    auto in_place16 = upload(be, std::vector<std::uint16_t>(n, kNotWritten));
    loss.softmax_xent(dz.get(), dl.get(), rows, cols, 0.25f, dz.get(), in_place16.get(),
                      stats.get());
    EXPECT_EQ(download(be, in_place16), download(be, d16)) << "xent in place";
    auto m16 = upload(be, std::vector<std::uint16_t>(n, kNotWritten));
    loss.mse(dz.get(), targets.get(), rows, cols, 0.5f, d.get(), m16.get(), stats.get());
    EXPECT_TRUE(is_bf16_rounding(download(be, m16), download(be, d))) << "mse";
  }
}

TEST(Bf16OutputGrad, TheLossCopyIsTheGradientsRoundingOnTheGpu) {
  expect_copies_are_roundings(*gpu_test::make_gpu(Precision::kBf16));
}

TEST(Bf16OutputGrad, TheLossCopyIsTheGradientsRoundingOnTheCpu) {
  expect_copies_are_roundings(*gpu_test::make_cpu());
}

TEST(Bf16LayerNormCopy, IsTheOutputsRounding) {
  std::unique_ptr<Backend> backends[] = {gpu_test::make_gpu(Precision::kBf16),
                                         gpu_test::make_cpu()};
  for (auto& be : backends) {
    const int rows = 37, dim = 200;
    const std::size_t n = std::size_t(rows) * dim;
    auto x = upload(*be, gpu_test::random_vector(n, 3, -3.0f, 3.0f));
    auto w = upload(*be, gpu_test::random_vector(dim, 4, 0.5f, 1.5f));
    auto b = upload(*be, gpu_test::random_vector(dim, 5));
    DeviceBuffer<float> y(*be, n), y_plain(*be, n), mean(*be, rows), rstd(*be, rows);
    auto y16 = upload(*be, std::vector<std::uint16_t>(n, kNotWritten));
    auto& seq = be->kernels<dptrain::SequenceKernels>();
    seq.layer_norm(x.get(), w.get(), b.get(), rows, dim, 1e-5f, y.get(), mean.get(), rstd.get(),
                   y16.get());
    seq.layer_norm(x.get(), w.get(), b.get(), rows, dim, 1e-5f, y_plain.get(), mean.get(),
                   rstd.get());
    EXPECT_EQ(download(*be, y), download(*be, y_plain)) << be->name();
    EXPECT_TRUE(is_bf16_rounding(download(*be, y16), download(*be, y))) << be->name();
  }
}

// A residual block's sum of gradients (Backend::sum) writes the copy the
// block before reads as its dy.
TEST(Bf16SumCopy, IsTheSumsRounding) {
  std::unique_ptr<Backend> backends[] = {gpu_test::make_gpu(Precision::kBf16),
                                         gpu_test::make_cpu()};
  for (auto& be : backends) {
    const std::size_t n = 1000;
    auto a = upload(*be, gpu_test::random_vector(n, 7));
    auto b = upload(*be, gpu_test::random_vector(n, 8));
    DeviceBuffer<float> y(*be, n), y_plain(*be, n);
    auto y16 = upload(*be, std::vector<std::uint16_t>(n, kNotWritten));
    be->sum(a.get(), b.get(), y.get(), n, y16.get());
    be->sum(a.get(), b.get(), y_plain.get(), n);
    EXPECT_EQ(download(*be, y), download(*be, y_plain)) << be->name();
    EXPECT_TRUE(is_bf16_rounding(download(*be, y16), download(*be, y))) << be->name();
  }
}

// A convolution's plan reads the bf16 copies it is given under bf16 (the
// conv layer's roundings, made once a step), in every pass: with copies of
// 2·x, 2·w and 2·dy (exact doublings of the roundings) and a zero bias, y,
// dx and dw double exactly; a plan that rounded the fp32 values again
// would give the plain results.
TEST(Bf16ConvOperands, ThePlanReadsTheCopiesGiven) {
  using gpu_test::ConvInputs;
  using gpu_test::ConvOutputs;
  const dptrain::ConvGeometry g = gpu_test::conv_geometry(2, 3, 4, {6, 6}, 3, 1, 1, 2);
  const int rows = 2;
  auto be = gpu_test::make_gpu(Precision::kBf16);
  auto plan = be->kernels<dptrain::SpatialKernels>().conv_plan(g);
  ConvInputs in = gpu_test::random_conv_inputs(g, rows, 11);
  in.b.assign(in.b.size(), 0.0f);
  const ConvOutputs plain = gpu_test::run_conv(*be, *plan, g, rows, in);
  auto doubled = [&](const std::vector<float>& v) {
    return upload(*be, gpu_test::bf16_bits_of(v, 2.0f));
  };
  auto x = upload(*be, in.x), w = upload(*be, in.w), b = upload(*be, in.b), dy = upload(*be, in.dy);
  const auto x2 = doubled(in.x), w2 = doubled(in.w), dy2 = doubled(in.dy);
  DeviceBuffer<float> y(*be, plain.y.size()), dx(*be, in.x.size()), dw(*be, in.w.size()),
      db(*be, in.b.size());
  plan->forward({x.get(), x2.get()}, {w.get(), w2.get()}, b.get(), y.get(), rows);
  plan->backward_data({dy.get(), dy2.get()}, w.get(), dx.get(), rows);
  plan->backward_weights({x.get(), x2.get()}, dy.get(), dw.get(), db.get(), rows);
  auto twice = [](std::vector<float> v) {
    for (float& f : v) f *= 2.0f;
    return v;
  };
  EXPECT_EQ(download(*be, y), twice(twice(plain.y)));  // x and w doubled: 4x
  EXPECT_EQ(download(*be, dx), twice(plain.dx));
  EXPECT_EQ(download(*be, dw), twice(plain.dw));
}

constexpr int kRows = 24, kIn = 12, kClasses = 10;

std::unique_ptr<Model> make_model(Backend& be, const char* spec) {
  auto m = std::make_unique<Model>(be, dptrain::parse_model_spec(spec), kIn, kRows);
  m->init(3);
  return m;
}

TEST(Bf16OutputGrad, OnlyALastDenseThatRoundsOffersASlot) {
  auto bf16 = gpu_test::make_gpu(Precision::kBf16);
  EXPECT_NE(make_model(*bf16, "dense:16,relu,dense:10")->output_grad_bf16(), nullptr);
  // A --model ends in dense:N; a model of layers may end in another kind.
  std::vector<std::unique_ptr<dptrain::Layer>> layers;
  dptrain::LayerBuilder builder;
  layers.push_back(builder.build({"dense", {"6"}, "dense:6"}, dptrain::Shape{kIn}));
  layers.push_back(builder.build({"tanh", {}, "tanh"}, dptrain::Shape{6}));
  EXPECT_EQ(Model(*bf16, std::move(layers), dptrain::Shape{kIn}, kRows).output_grad_bf16(),
            nullptr);
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    auto gpu = gpu_test::make_gpu(p);
    EXPECT_EQ(make_model(*gpu, "dense:16,relu,dense:10")->output_grad_bf16(), nullptr);
  }
  auto cpu = gpu_test::make_cpu();
  EXPECT_EQ(make_model(*cpu, "dense:16,relu,dense:10")->output_grad_bf16(), nullptr);
}

// One forward, loss and backward of a fresh model; the gradient arena.
// copy: the loss writes its bf16 copy and backward gets it; doubled: the
// copy is then replaced by the rounding of 2·dy.
std::vector<float> gradients(Backend& be, bool copy, bool doubled) {
  auto m = make_model(be, "dense:16,gelu:tanh,dense:10");
  const auto x = upload(be, gpu_test::random_vector(std::size_t(kRows) * kIn, 8));
  const auto y = upload(be, gpu_test::random_labels(kRows, kClasses, 9));
  DeviceBuffer<float> stats(be, 2);
  std::uint16_t* dy16 = copy ? m->output_grad_bf16() : nullptr;
  const float* logits = m->forward(x.get(), kRows);
  be.kernels<LossKernels>().softmax_xent(logits, y.get(), kRows, kClasses, 1.0f / kRows,
                                         m->output_grad(), dy16, stats.get());
  if (doubled) {
    const std::size_t n = std::size_t(kRows) * kClasses;
    const auto bits = gpu_test::bf16_bits_of(download(be, m->output_grad(), n), 2.0f);
    be.copy_to_device(dy16, bits.data(), n * sizeof(std::uint16_t));
  }
  m->backward(x.get(), m->output_grad(), kRows, nullptr, dy16);
  return download(be, m->grads(), m->num_params());
}

TEST(Bf16OutputGrad, AStepWithTheCopyHasTheBitsOfOneWithout) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  EXPECT_EQ(gradients(*gpu, true, false), gradients(*gpu, false, false));
}

TEST(Bf16OutputGrad, TheLastDenseReadsTheCopyItIsGiven) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  const std::vector<float> plain = gradients(*gpu, false, false);
  const std::vector<float> doubled = gradients(*gpu, true, true);
  ASSERT_EQ(plain.size(), doubled.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < plain.size(); ++i)
    if (doubled[i] != 2.0f * plain[i]) ++differ;
  EXPECT_EQ(differ, 0u) << "of " << plain.size() << " gradients, not doubled exactly";
}

}  // namespace
