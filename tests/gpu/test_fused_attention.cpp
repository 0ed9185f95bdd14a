// Implements: the checks of `--attention fused` (FusedAttentionKernels on CUDA)
// against the CPU backend's attention (the math path, the reference): an attn
// layer's output, its input gradient and every parameter gradient from the same
// weights and inputs, causal and not, T not a multiple of a tile (1, 37, 70,
// 100, 150), head dimensions 8, 32, 64, 100, 128 (padded and exact), one to
// three heads, in fp32, tf32 and bf16 (fp32 and tf32 at 100 and 128 take
// over 48 KiB of dynamic shared memory in backward); a second run gives the same bits; under tf32
// the kernels multiply in TF32, not fp32; the fused layer
// holds nothing of size T × T; under bf16 the kernels read qkv's bf16 rounding
// alone with the bits of the fp32 qkv (which they round as they stage it); and
// the choices --attention cannot honour are usage errors.
//
// The bounds, against the largest value of each tensor. fp32: each value is a
// chain of three sums (scores over hd, the softmax-weighted sum over T, the
// projections over D) of terms no larger than the inputs' scale, summed in
// another order than the CPU's: rounding errors of 2^-24 a term that add as a
// random walk, about sqrt(T + hd + D) · 6e-8 · 3 ≈ 3e-6: bound 5e-6 (measured
// on the emulation: at most 5.6e-7; the test says its worst). bf16: q, k, v, p,
// do and ds, and the projections' operands, are rounded to bf16 (2^-9 = 2e-3
// relative) before products summed in fp32, a few such roundings per value:
// bound 3e-2 (measured: at most 6.8e-3). tf32: the same roundings to TF32
// (2^-11 relative, a quarter of bf16's): bound 8e-3 (measured: at most
// 7.0e-4). And at least 1e-6 somewhere, so a bf16 or tf32 run that never
// rounded an operand fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/layer.hpp"
#include "dptrain/model/layer_spec.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::AttentionImpl;
using dptrain::DeviceBuffer;
using dptrain::Precision;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;
using Floats = std::vector<float>;

struct Case {
  int batch, tokens, heads, head_dim;
  bool causal;
};

std::string spec_of(const Case& c) {
  return "attn:" + std::to_string(c.heads) + (c.causal ? ":causal" : "");
}

// One attn layer of case c on be: output, input gradient, parameter
// gradients, and the bytes the layer allocated.
struct LayerRun {
  Floats y, dx, grads;
  std::size_t bytes = 0;
};

LayerRun run_layer(dptrain::Backend& be, const Case& c) {
  const int d = c.heads * c.head_dim;
  // A model spec ends in dense:N; the layer is the first of one.
  const auto specs = dptrain::parse_model_spec(spec_of(c) + ",dense:1");
  dptrain::LayerBuilder builder;
  const auto built = builder.build(specs.front(), {c.tokens, d});
  dptrain::Layer& layer = *built;
  const std::size_t n_params = dptrain::arena_size(layer.params());
  Floats params(n_params, 0.0f);
  layer.init(7, false, {params.data(), nullptr, nullptr});
  // Non-zero biases, so that their gradients' paths are exercised too.
  const Floats jitter = random_vector(n_params, 21, -0.05f, 0.05f);
  for (std::size_t i = 0; i < n_params; ++i) params[i] += jitter[i];
  auto dparams = upload(be, params);
  DeviceBuffer<float> grads(be, n_params);
  layer.bind({dparams.get(), grads.get(), nullptr});
  const std::size_t before = be.buffer_bytes();
  layer.allocate(be, c.batch);
  LayerRun out;
  out.bytes = be.buffer_bytes() - before;
  const std::size_t n = static_cast<std::size_t>(c.batch) * c.tokens * d;
  auto x = upload(be, random_vector(n, 22));
  auto dy = upload(be, random_vector(n, 23));
  DeviceBuffer<float> y(be, n), dx(be, n);
  const dptrain::Shape shape{c.tokens, d};
  layer.forward(be, {x.get(), c.batch, shape}, {y.get(), c.batch, shape}, dptrain::Mode::kTrain);
  layer.backward_params(be, {x.get(), c.batch, shape}, {dy.get(), c.batch, shape});
  layer.backward_input(be, {x.get(), c.batch, shape}, {y.get(), c.batch, shape},
                       {dy.get(), c.batch, shape}, {dx.get(), c.batch, shape});
  out.y = download(be, y);
  out.dx = download(be, dx);
  out.grads = download(be, grads);
  return out;
}

double largest(const Floats& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double worst_error(const Floats& got, const Floats& want) {
  double e = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]));
  return e;
}

// Head dims 6 and 12 stage rows value by value where 16-byte loads do not
// fit the rows (6: fp32 and bf16; 12: a bf16 qkv), and 6 writes them so.
// T 150 and 100 give blocks of every kind: whole ones, warps past the end,
// and under the causal mask warps that skip a step the block visits. Head
// dims 100 and 128 run fp32's and tf32's one-warp blocks, whose gradient
// kernels take dynamic shared memory over 48 KiB.
const Case kCases[] = {
    {1, 1, 1, 8, true},     {2, 37, 3, 8, true},   {2, 37, 2, 32, false},  {1, 70, 1, 64, true},
    {2, 33, 2, 64, false},  {1, 40, 1, 16, true},  {1, 37, 1, 128, true},  {1, 37, 2, 6, true},
    {2, 21, 3, 12, false},  {1, 150, 2, 64, true}, {1, 100, 1, 32, false}, {2, 20, 1, 100, false},
};

// Of a tensor's largest value.
double bound_of(Precision p) {
  return p == Precision::kBf16 ? 3e-2 : p == Precision::kTf32 ? 8e-3 : 5e-6;
}
const char* name_of(Precision p) {
  return p == Precision::kBf16 ? "bf16" : p == Precision::kTf32 ? "tf32" : "fp32";
}

void check_against_cpu(Precision precision) {
  auto cpu = gpu_test::make_cpu();
  auto fused = gpu_test::make_gpu(precision, AttentionImpl::kFused);
  const bool rounds = precision != Precision::kFp32;
  double worst = 0.0;  // of scale, over every case and tensor: said at the end
  for (const Case& c : kCases) {
    const std::string label = spec_of(c) + " T " + std::to_string(c.tokens) + " hd " +
                              std::to_string(c.head_dim) + " N " + std::to_string(c.batch);
    const LayerRun g = run_layer(*fused, c), want = run_layer(*cpu, c);
    const std::vector<std::pair<const char*, std::pair<Floats, Floats>>> tensors = {
        {"output", {g.y, want.y}}, {"input gradient", {g.dx, want.dx}},
        {"parameter gradients", {g.grads, want.grads}}};
    for (const auto& [name, pair] : tensors) {
      const double scale = largest(pair.second);
      const double atol = bound_of(precision) * scale;
      worst = std::max(worst, worst_error(pair.first, pair.second) / scale);
      EXPECT_TRUE(all_close(pair.first, pair.second, 0.0, atol))
          << name << ", " << label;
      if (rounds && c.tokens > 1)
        EXPECT_GT(worst_error(pair.first, pair.second), 1e-6 * scale)
            << name << " as fp32 would give, " << label;
    }
    const LayerRun again = run_layer(*fused, c);
    EXPECT_EQ(again.y, g.y) << "not deterministic, " << label;
    EXPECT_EQ(again.dx, g.dx) << "not deterministic, " << label;
    EXPECT_EQ(again.grads, g.grads) << "not deterministic, " << label;
  }
  std::printf("fused attention %s vs the cpu: worst difference %.3g of a tensor's scale\n",
              name_of(precision), worst);
}

TEST(FusedAttention, Fp32MatchesTheCpu) { check_against_cpu(Precision::kFp32); }
TEST(FusedAttention, Tf32MatchesTheCpu) { check_against_cpu(Precision::kTf32); }
TEST(FusedAttention, Bf16MatchesTheCpu) { check_against_cpu(Precision::kBf16); }

// The kernels alone (the layer's projections run in TF32 too under tf32):
// from the same qkv and do, o, lse and dqkv under tf32 differ from fp32's
// (the fp32 kernels, run again, give their own bits) and stay within the
// tf32 bound of them.
TEST(FusedAttention, Tf32MultipliesInTf32) {
  auto tf32 = gpu_test::make_gpu(Precision::kTf32, AttentionImpl::kFused);
  auto fp32 = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kFused);
  for (const Case& c : {Case{2, 37, 2, 32, true}, Case{1, 70, 1, 64, false}}) {
    const dptrain::HeadShape s{c.batch, c.tokens, c.heads, c.head_dim};
    const std::size_t n = std::size_t(c.batch) * c.tokens * c.heads * c.head_dim;
    const std::size_t rows = std::size_t(c.batch) * c.heads * c.tokens;
    const Floats qkv_host = random_vector(3 * n, 51), d_o_host = random_vector(n, 52);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    auto run = [&](dptrain::Backend& be) {
      auto* fused = be.find_kernels<dptrain::FusedAttentionKernels>();
      EXPECT_TRUE(fused && !fused->reads_qkv_bf16());
      auto qkv = upload(be, qkv_host);
      auto d_o = upload(be, d_o_host);
      DeviceBuffer<float> o(be, n), lse(be, rows), rowdot(be, rows), dqkv(be, 3 * n);
      fused->forward(qkv.get(), s, scale, c.causal, o.get(), lse.get(), nullptr);
      fused->backward(qkv.get(), o.get(), lse.get(), d_o.get(), s, scale, c.causal,
                      rowdot.get(), dqkv.get(), nullptr, nullptr);
      return std::vector<Floats>{download(be, o), download(be, lse), download(be, dqkv)};
    };
    const auto got = run(*tf32), want = run(*fp32);
    EXPECT_EQ(run(*fp32), want) << "fp32 not deterministic";
    const char* names[] = {"o", "lse", "dqkv"};
    for (int i = 0; i < 3; ++i) {
      const double scale_i = largest(want[i]), error = worst_error(got[i], want[i]);
      EXPECT_LE(error, bound_of(Precision::kTf32) * scale_i) << names[i] << ", T " << c.tokens;
      EXPECT_GT(error, 1e-5 * scale_i) << names[i] << " as fp32 gives it, T " << c.tokens;
    }
  }
}

// Under bf16 the attn layer keeps qkv in bf16 alone: the kernels given its
// rounding give the bits they give from the fp32 qkv (o, lse, dqkv and the
// copies), causal and not, an exact and a padded head dimension.
TEST(FusedAttention, Bf16QkvAloneGivesTheBitsOfTheFp32Qkv) {
  auto be = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kFused);
  auto* fused = be->find_kernels<dptrain::FusedAttentionKernels>();
  ASSERT_TRUE(fused);
  ASSERT_TRUE(fused->reads_qkv_bf16());
  for (const Case& c : {Case{2, 37, 2, 32, true}, Case{1, 33, 3, 24, false}}) {
    const dptrain::HeadShape s{c.batch, c.tokens, c.heads, c.head_dim};
    const std::size_t n = std::size_t(c.batch) * c.tokens * c.heads * c.head_dim;
    const std::size_t rows = std::size_t(c.batch) * c.heads * c.tokens;
    auto qkv = upload(*be, random_vector(3 * n, 31));
    auto d_o = upload(*be, random_vector(n, 32));
    DeviceBuffer<std::uint16_t> qkv16(*be, 3 * n);
    be->kernels<dptrain::ConvertKernels>().to_bf16(qkv.get(), qkv16.get(), 3 * n);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    auto run = [&](dptrain::GemmOperand in) {
      DeviceBuffer<float> o(*be, n), lse(*be, rows), rowdot(*be, rows), dqkv(*be, 3 * n);
      DeviceBuffer<std::uint16_t> o16(*be, n), dqkv16(*be, 3 * n);
      fused->forward(in, s, scale, c.causal, o.get(), lse.get(), o16.get());
      fused->backward(in, o.get(), lse.get(), d_o.get(), s, scale, c.causal, rowdot.get(),
                      dqkv.get(), o16.get(), dqkv16.get());
      Floats all = download(*be, o);
      for (const Floats& part : {download(*be, lse), download(*be, dqkv)})
        all.insert(all.end(), part.begin(), part.end());
      std::vector<std::uint16_t> copies(n + 3 * n);
      be->copy_to_host(copies.data(), o16.get(), n * 2);
      be->copy_to_host(copies.data() + n, dqkv16.get(), 3 * n * 2);
      return std::make_pair(all, copies);
    };
    const auto from_fp32 = run(qkv.get());
    const auto from_bf16 = run(dptrain::GemmOperand(nullptr, qkv16.get()));
    EXPECT_EQ(from_bf16.first, from_fp32.first) << "T " << c.tokens << " hd " << c.head_dim;
    EXPECT_EQ(from_bf16.second, from_fp32.second) << "T " << c.tokens << " hd " << c.head_dim;
  }
}

// Under bf16 the attn layer keeps o, do and dqkv in their bf16 copies
// alone: the kernels then read and write the copies alone, with the bits
// they give with fp32 buffers that hold the copies' values (Σ do ∘ o is
// summed from the bf16 o and do), and lse the same bits.
TEST(FusedAttention, Bf16OutputsAloneGiveTheBitsOfTheirCopies) {
  auto be = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kFused);
  auto* fused = be->find_kernels<dptrain::FusedAttentionKernels>();
  ASSERT_TRUE(fused);
  for (const Case& c : {Case{2, 37, 2, 32, true}, Case{1, 33, 3, 12, false}}) {
    const dptrain::HeadShape s{c.batch, c.tokens, c.heads, c.head_dim};
    const std::size_t n = std::size_t(c.batch) * c.tokens * c.heads * c.head_dim;
    const std::size_t rows = std::size_t(c.batch) * c.heads * c.tokens;
    auto qkv16 = upload(*be, gpu_test::bf16_bits_of(random_vector(3 * n, 41)));
    const Floats d_o_host = random_vector(n, 42);
    auto d_o = upload(*be, gpu_test::values_of_bf16(d_o_host));
    auto d_o16 = upload(*be, gpu_test::bf16_bits_of(d_o_host));
    const dptrain::GemmOperand in(nullptr, qkv16.get());
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    // alone: no fp32 o, do or dqkv; else o and do hold the copies' values.
    auto run = [&](bool alone) {
      DeviceBuffer<float> o(*be, n), lse(*be, rows), rowdot(*be, rows), dqkv(*be, 3 * n);
      DeviceBuffer<std::uint16_t> o16(*be, n), dqkv16(*be, 3 * n);
      fused->forward(in, s, scale, c.causal, alone ? nullptr : o.get(), lse.get(), o16.get());
      if (!alone) be->kernels<dptrain::ConvertKernels>().from_bf16(o16.get(), o.get(), n);
      const dptrain::GemmOperand dout =
          alone ? dptrain::GemmOperand(nullptr, d_o16.get()) : dptrain::GemmOperand(d_o.get());
      fused->backward(in, alone ? nullptr : o.get(), lse.get(), dout, s, scale, c.causal,
                      rowdot.get(), alone ? nullptr : dqkv.get(), o16.get(), dqkv16.get());
      std::vector<std::uint16_t> copies(n + 3 * n);
      be->copy_to_host(copies.data(), o16.get(), n * 2);
      be->copy_to_host(copies.data() + n, dqkv16.get(), 3 * n * 2);
      return std::make_pair(download(*be, lse), copies);
    };
    const auto beside = run(false), alone = run(true);
    EXPECT_EQ(alone.first, beside.first) << "lse, T " << c.tokens << " hd " << c.head_dim;
    EXPECT_EQ(alone.second, beside.second) << "copies, T " << c.tokens << " hd " << c.head_dim;
  }
  // Neither buffer at all is an error, not a silent pass.
  const dptrain::HeadShape s{1, 4, 1, 8};
  DeviceBuffer<float> lse(*be, 4);
  DeviceBuffer<std::uint16_t> qkv16(*be, 3 * 32);
  EXPECT_THROW(fused->forward(dptrain::GemmOperand(nullptr, qkv16.get()), s, 1.0f, true, nullptr,
                              lse.get(), nullptr),
               dptrain::Error);
}

// The math path holds p and its gradient, N·H·T·T floats each; the fused
// one holds per-row statistics only.
TEST(FusedAttention, HoldsNothingOfSizeTTimesT) {
  const Case c{2, 70, 2, 16, true};
  auto fused = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kFused);
  auto math = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kMath);
  const std::size_t scores = std::size_t(c.batch) * c.heads * c.tokens * c.tokens * sizeof(float);
  const LayerRun f = run_layer(*fused, c), m = run_layer(*math, c);
  EXPECT_GE(m.bytes, f.bytes + 2 * scores);
  // qkv and its gradient, the merged heads and theirs, two floats a row.
  const std::size_t seq = std::size_t(c.batch) * c.tokens * c.heads * c.head_dim;
  const std::size_t rows = std::size_t(c.batch) * c.heads * c.tokens;
  EXPECT_EQ(f.bytes, (8 * seq + 2 * rows) * sizeof(float));
  // auto is fused on cuda: the same bytes.
  auto automatic = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kAuto);
  EXPECT_EQ(run_layer(*automatic, c).bytes, f.bytes);
}

// Asked for by name, fused attention must run or say why; auto falls back.
TEST(FusedAttention, UnsupportedChoicesAreUsageErrors) {
  const Case wide{1, 5, 1, 129, false};  // head dims up to 128
  auto fused = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kFused);
  try {
    run_layer(*fused, wide);
    ADD_FAILURE() << "head dim 129 under --attention fused ran";
  } catch (const dptrain::Error& e) {
    EXPECT_EQ(e.code(), dptrain::ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("up to 128, not 129"), std::string::npos) << e.what();
  }
  auto automatic = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kAuto);
  auto math = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kMath);
  EXPECT_EQ(run_layer(*automatic, wide).bytes, run_layer(*math, wide).bytes);
  for (AttentionImpl a : {AttentionImpl::kFused, AttentionImpl::kCudnn}) {
    dptrain::BackendOptions o;
    o.attention = a;
    try {
      dptrain::make_backend("cpu", o);
      ADD_FAILURE() << "the cpu backend took a fused attention";
    } catch (const dptrain::Error& e) {
      EXPECT_EQ(e.code(), dptrain::ExitCode::kUsage);
    }
  }
}

}  // namespace
