// Implements: the logits in bf16 (Model's Logits::kBf16: --precision bf16
// with --loss xent). The fused classifier over bf16 logits
// (LossKernels::softmax_xent_bf16) against the CPU's, which is the fp32 row
// kernel on the same values: the loss within the exponentials' difference
// (expf against the CPU's exp: a few ulps a term, summed in double), the
// correct count exactly, each bf16 gradient within one bf16 step of the
// CPU's; in place the same bits as apart, and without a gradient the
// stats alone. A model whose head writes its logits in bf16 only: the
// logits are the fp32-logits model's rounded (its biases made bf16 values,
// so both add the same bias), and with the same logits' gradient its
// backward gives the fp32-logits model's gradients bit for bit on the
// emulation (both read only that gradient's bf16 copy); it keeps no fp32
// logits from forward to backward, and the bf16 slot exists only where the
// backend rounds GEMM operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "gpu_env.hpp"
#include "training_support.hpp"

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::Logits;
using dptrain::LossKernels;
using dptrain::Model;
using dptrain::Precision;
using gpu_test::download;
using gpu_test::upload;
using Bits = std::vector<std::uint16_t>;
using Floats = std::vector<float>;

Floats values_of(const Bits& bits) {
  Floats v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = dptrain::bf16_value(bits[i]);
  return v;
}

// Each bf16 value of got within one bf16 step (2^-7 of the value) of want's.
::testing::AssertionResult within_a_step(const Bits& got, const Bits& want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float g = dptrain::bf16_value(got[i]), w = dptrain::bf16_value(want[i]);
    if (std::fabs(g - w) > std::ldexp(std::fabs(w), -7) + 1e-30f)
      return ::testing::AssertionFailure() << "gradient[" << i << "] = " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

struct Stats {
  float loss = 0, correct = 0;
};

// The GPU's stats against the CPU's: the correct count exactly; the loss
// sum within 1e-5 of itself (float stats, a few ulps per exponential) plus
// 1e-6 a row.
void expect_stats_near(const Stats& gpu, const Stats& cpu, int rows) {
  EXPECT_EQ(gpu.correct, cpu.correct);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss) + 1e-6 * rows);
}

// The classifier on be over logits16: the stats and the gradient written
// apart (dlogits16 a buffer of its own) or in place.
Stats classify(Backend& be, const Bits& logits16, const std::vector<std::int32_t>& labels,
               int cols, bool in_place, Bits* grad) {
  const int rows = static_cast<int>(labels.size());
  auto z = upload(be, logits16);
  auto y = upload(be, labels);
  DeviceBuffer<std::uint16_t> apart(be, logits16.size());
  DeviceBuffer<float> stats(be, 2);
  be.fill(stats.get(), 0.0f, 2);
  std::uint16_t* d = !grad ? nullptr : in_place ? z.get() : apart.get();
  be.kernels<LossKernels>().softmax_xent_bf16(z.get(), y.get(), rows, cols, 1.0f / rows, d,
                                              stats.get());
  if (grad) *grad = download(be, in_place ? z : apart);
  const Floats s = download(be, stats);
  return {s[0], s[1]};
}

// Widths of each kernel shape (a warp, 128 and 512 threads a row), read a
// value at a time (10, 3001) and 8 at a time (multiples of 8).
TEST(Bf16Classifier, IsTheCpusOnTheSameValues) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  auto cpu = gpu_test::make_cpu();
  const int rows = 19;
  for (int cols : {10, 3000, 3001, 9000}) {
    SCOPED_TRACE(cols);
    const Bits z16 =
        gpu_test::bf16_bits_of(gpu_test::random_vector(std::size_t(rows) * cols, 31, -6.0f, 6.0f));
    // Every other row labelled with its first maximum: the correct count
    // then checks the argmax the kernel finds.
    auto labels = gpu_test::random_labels(rows, cols, 32);
    for (int r = 1; r < rows; r += 2) {
      const Floats row = values_of(Bits(z16.begin() + std::ptrdiff_t(r) * cols,
                                        z16.begin() + std::ptrdiff_t(r + 1) * cols));
      labels[std::size_t(r)] =
          static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    }
    Bits want, apart, in_place;
    const Stats ref = classify(*cpu, z16, labels, cols, false, &want);
    const Stats got = classify(*gpu, z16, labels, cols, false, &apart);
    EXPECT_GE(ref.correct, rows / 2);
    expect_stats_near(got, ref, rows);
    EXPECT_TRUE(within_a_step(apart, want));
    const Stats again = classify(*gpu, z16, labels, cols, true, &in_place);
    EXPECT_EQ(in_place, apart);
    EXPECT_EQ(again.loss, got.loss);
    const Stats eval = classify(*gpu, z16, labels, cols, false, nullptr);
    EXPECT_EQ(eval.loss, got.loss);
    EXPECT_EQ(eval.correct, got.correct);
  }
}

constexpr int kRows = 24, kIn = 12, kClasses = 64;
constexpr const char* kSpec = "dense:16,gelu:tanh,dense:64";

std::unique_ptr<Model> make_model(Backend& be, Logits logits) {
  auto m = std::make_unique<Model>(be, dptrain::parse_model_spec(kSpec), dptrain::Shape{kIn},
                                   kRows, 0, dptrain::Recompute::kNone,
                                   dptrain::ModelStorage::kAllocated, logits);
  m->init(3);
  // The head's bias: bf16 values, which the bf16 epilogue adds as they are.
  const dptrain::ParamInfo& bias = m->param_layout().back();
  const Bits b16 = gpu_test::bf16_bits_of(gpu_test::random_vector(bias.count, 33));
  const Floats b = values_of(b16);
  be.copy_to_device(m->params() + bias.offset, b.data(), b.size() * sizeof(float));
  return m;
}

TEST(Bf16Logits, OnlyAHeadOnABackendThatRoundsKeepsThemInBf16) {
  auto bf16 = gpu_test::make_gpu(Precision::kBf16);
  EXPECT_NE(make_model(*bf16, Logits::kBf16)->output_bf16(), nullptr);
  EXPECT_EQ(make_model(*bf16, Logits::kFp32)->output_bf16(), nullptr);
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    auto gpu = gpu_test::make_gpu(p);
    EXPECT_EQ(make_model(*gpu, Logits::kBf16)->output_bf16(), nullptr);
  }
  auto cpu = gpu_test::make_cpu();
  EXPECT_EQ(make_model(*cpu, Logits::kBf16)->output_bf16(), nullptr);
}

TEST(Bf16Logits, TheHeadTrainsFromItsBf16LogitsAsTheFp32HeadFromTheirGradient) {
  auto gpu = gpu_test::make_gpu(Precision::kBf16);
  auto m32 = make_model(*gpu, Logits::kFp32), m16 = make_model(*gpu, Logits::kBf16);
  const auto x = upload(*gpu, gpu_test::random_vector(std::size_t(kRows) * kIn, 34));
  const auto labels = gpu_test::random_labels(kRows, kClasses, 35);
  const auto y = upload(*gpu, labels);
  const std::size_t n = std::size_t(kRows) * kClasses;

  // Forward: the bf16 logits are the fp32 ones rounded.
  const Floats l32 = download(*gpu, m32->forward(x.get(), kRows), n);
  m16->forward(x.get(), kRows);
  const Bits l16 = download(*gpu, m16->output_bf16(), n);
  float largest = 0.0f;
  for (float v : l32) largest = std::max(largest, std::fabs(v));
  for (std::size_t i = 0; i < n; ++i) {
    if (gpu_test::kEmulated) {
      ASSERT_EQ(l16[i], dptrain::bf16_bits(l32[i])) << i;
    } else {  // one rounding, and another order of the fp32 sums
      ASSERT_NEAR(dptrain::bf16_value(l16[i]), l32[i],
                  std::ldexp(std::fabs(l32[i]), -8) + 1e-5f * largest) << i;
    }
  }

  // The loss over them, in place, against the CPU's on the same values.
  DeviceBuffer<float> stats(*gpu, 2);
  gpu->fill(stats.get(), 0.0f, 2);
  dptrain::Shard shard;
  shard.rows = kRows;
  shard.labels = y.get();
  dptrain::apply_loss(*gpu, dptrain::LossKind::kXent, nullptr, shard, m16->output_shape(),
                      1.0f / kRows, m16->output_grad(), stats.get(), m16->output_grad_bf16(),
                      m16->output_bf16());
  const Bits grad16 = download(*gpu, m16->output_bf16(), n);
  auto cpu = gpu_test::make_cpu();
  Bits want;
  const Stats ref = classify(*cpu, l16, labels, kClasses, true, &want);
  const Floats s = download(*gpu, stats);
  expect_stats_near({s[0], s[1]}, ref, kRows);
  EXPECT_TRUE(within_a_step(grad16, want));

  // Backward from that gradient: the fp32 head given it (as its fp32
  // gradient and its bf16 copy) computes the same gradients.
  m16->backward(x.get(), m16->output_grad(), kRows, nullptr, m16->output_grad_bf16());
  const Floats dy = values_of(grad16);
  gpu->copy_to_device(m32->output_grad(), dy.data(), n * sizeof(float));
  gpu->copy_to_device(m32->output_grad_bf16(), grad16.data(), n * sizeof(std::uint16_t));
  m32->backward(x.get(), m32->output_grad(), kRows, nullptr, m32->output_grad_bf16());
  const Floats g16 = download(*gpu, m16->grads(), m16->num_params());
  const Floats g32 = download(*gpu, m32->grads(), m32->num_params());
  if (gpu_test::kEmulated)
    EXPECT_EQ(g16, g32);
  else
    EXPECT_TRUE(gpu_test::all_close(g16, g32, 1e-5, 1e-7));

  // The plan: the fp32 logits are no longer kept from forward to backward
  // (the bf16 ones share the per-pass region with the gradient's copy).
  const auto kept = [](const Model& m) {
    return m.activation_plan(kRows, dptrain::Recompute::kNone).kept;
  };
  EXPECT_EQ(kept(*m32) - kept(*m16), n * sizeof(float));
}

}  // namespace
