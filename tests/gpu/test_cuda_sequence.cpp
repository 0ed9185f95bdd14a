// Implements: the CUDA sequence kernels (embedding, positions, layer norm,
// the head shuffles, the attention softmax, images as sequences, the mean
// over positions) and the strided-batched GEMM, checked against the CPU
// backend on random inputs whose sizes are not multiples of a warp or a
// block (T = 33, D/H = 7, N·H = 6, ...). Copies and in-order sums must be
// bitwise the CPU's; row statistics summed in another order within float
// bounds derived below; every kernel gives the same bits on a second run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::DeviceBuffer;
using dptrain::HeadShape;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;
using Floats = std::vector<float>;

class CudaSequence : public gpu_test::CpuAndGpu {
 protected:
  // f(be, inputs on be) -> outputs downloaded; run on both backends.
  template <typename F>
  static void both(F f, Floats* gpu_out, Floats* cpu_out) {
    *gpu_out = f(*gpu_);
    *cpu_out = f(*cpu_);
  }
};

// Bitwise, counting -0 == +0 (the CPU may write either where a value is 0).
::testing::AssertionResult same_values(const Floats& got, const Floats& want) {
  return all_close(got, want, 0.0, 0.0);
}

std::vector<std::int32_t> random_ids(std::size_t n, int vocab, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = dist(gen);
  return ids;
}

std::size_t at(int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); }

TEST_F(CudaSequence, EmbeddingAndItsGradientAreBitwiseTheCpus) {
  struct Case { int rows, vocab, dim; };
  // Few ids (long runs of repeats) and a vocabulary that takes many ranges.
  for (Case c : {Case{1, 3, 1}, Case{37, 5, 33}, Case{300, 40, 130}, Case{513, 3001, 7},
                 Case{200, 70000, 2}}) {
    const auto ids = random_ids(c.rows, c.vocab, c.rows + c.dim);
    const Floats table = random_vector(at(c.vocab, c.dim), 1), dy = random_vector(at(c.rows, c.dim), 2);
    auto run = [&](dptrain::Backend& be, bool grad) {
      auto di = upload(be, ids);
      auto dt = upload(be, table);
      auto dg = upload(be, dy);
      DeviceBuffer<float> out(be, grad ? table.size() : dy.size());
      if (grad) be.fill(out.get(), 7.0f, out.size());  // every row is overwritten
      if (grad)
        be.kernels<dptrain::SequenceKernels>().embed_grad(di.get(), dg.get(), c.rows, c.vocab,
                                                          c.dim, out.get());
      else
        be.kernels<dptrain::SequenceKernels>().embed(di.get(), dt.get(), c.rows, c.dim, out.get());
      return download(be, out);
    };
    for (bool grad : {false, true}) {
      const Floats first = run(*gpu_, grad);
      EXPECT_TRUE(same_values(first, run(*cpu_, grad))) << "grad " << grad << " rows " << c.rows;
      EXPECT_EQ(first, run(*gpu_, grad)) << "not deterministic: grad " << grad;
    }
  }
}

TEST_F(CudaSequence, PositionsAndTheirGradientAreBitwiseTheCpus) {
  for (int batch : {1, 3, 5})
    for (int tokens : {1, 33})
      for (int dim : {1, 40}) {
        const Floats x = random_vector(at(batch * tokens, dim), 3), pos = random_vector(at(tokens, dim), 4);
        Floats g, c;
        for (bool grad : {false, true}) {
          both([&](dptrain::Backend& be) {
            auto dx = upload(be, x);
            auto dp = upload(be, pos);
            DeviceBuffer<float> out(be, grad ? pos.size() : x.size());
            if (grad)
              be.kernels<dptrain::SequenceKernels>().position_grad(dx.get(), batch, tokens, dim,
                                                                   out.get());
            else
              be.kernels<dptrain::SequenceKernels>().add_positions(dx.get(), dp.get(), batch,
                                                                   tokens, dim, out.get());
            return download(be, out);
          }, &g, &c);
          EXPECT_TRUE(same_values(g, c)) << batch << "x" << tokens << "x" << dim << " grad " << grad;
        }
      }
}

// Layer norm on rows of D values in [-1, 1). The statistics are sums of
// doubles in another order (a relative difference near 1e-16), rounded to
// float: mean and rstd equal the CPU's or differ by one float ulp (2^-24
// relative, 6e-8). y = (x - m)·s·w + b then differs by about s·|w|·ulp(m) plus
// an ulp or two of its own terms: within 1e-6 of the scale |s·w| + |b| (at
// most about 4 here). A variance divided by D - 1 is off by 1/(2(D-1))
// relative (1.5% at D = 33), and NaN at D = 1.
TEST_F(CudaSequence, LayerNormMatchesTheCpuWithinFloatRounding) {
  const float eps = 1e-5f;
  for (int rows : {1, 9, 61})
    for (int dim : {1, 3, 33, 257}) {
      const Floats x = random_vector(at(rows, dim), 5), w = random_vector(dim, 6, 0.5f, 1.5f),
                   b = random_vector(dim, 7), dy = random_vector(at(rows, dim), 8);
      auto run = [&](dptrain::Backend& be) {
        auto dx = upload(be, x), dw = upload(be, w), db = upload(be, b), dg = upload(be, dy);
        DeviceBuffer<float> y(be, x.size()), mean(be, rows), rstd(be, rows), gx(be, x.size()),
            gw(be, dim), gb(be, dim);
        be.kernels<dptrain::SequenceKernels>().layer_norm(dx.get(), dw.get(), db.get(), rows, dim,
                                                          eps, y.get(), mean.get(), rstd.get());
        be.kernels<dptrain::SequenceKernels>().layer_norm_grad(
            dx.get(), dg.get(), dw.get(), mean.get(), rstd.get(), rows, dim, gx.get());
        DeviceBuffer<float> work(
            be, be.kernels<dptrain::SequenceKernels>().layer_norm_workspace(rows, dim));
        be.kernels<dptrain::SequenceKernels>().layer_norm_param_grad(
            dx.get(), dg.get(), mean.get(), rstd.get(), rows, dim, gw.get(), gb.get(), work.get());
        return std::vector<Floats>{download(be, y), download(be, mean), download(be, rstd),
                                   download(be, gx), download(be, gw), download(be, gb)};
      };
      const auto g = run(*gpu_), c = run(*cpu_);
      const std::string shape = std::to_string(rows) + "x" + std::to_string(dim);
      EXPECT_TRUE(all_close(g[1], c[1], 1.2e-7, 1e-12)) << "mean " << shape;
      EXPECT_TRUE(all_close(g[2], c[2], 1.2e-7, 0.0)) << "rstd " << shape;
      // With D = 1 the row is its mean: x - m = 0 and rstd = 1/sqrt(eps).
      EXPECT_TRUE(all_close(g[0], c[0], 1e-6, 4e-6)) << "y " << shape;
      // dx = s·(g·w − mean(g·w) − x̂·mean(g·w·x̂)): terms up to about 3·s,
      // the means off by an ulp: 1e-6 of s·(|g·w| + 2) ~ 4e-6.
      EXPECT_TRUE(all_close(g[3], c[3], 1e-6, 4e-6)) << "dx " << shape;
      // Up to 64 rows one chunk sums in the CPU's order: bitwise given the
      // same statistics, which agree within an ulp (hence not exact here).
      EXPECT_TRUE(all_close(g[4], c[4], 1e-6, 1e-6 * rows)) << "dweight " << shape;
      EXPECT_TRUE(same_values(g[5], c[5])) << "dbias " << shape;
      EXPECT_EQ(g, run(*gpu_)) << "not deterministic " << shape;
    }
}

// As a block's first part, the layer norm's input gradient adds the
// shortcut's gradient and writes the bf16 copy in its own pass: on each
// backend the bits of its plain gradient followed by Backend::sum (the
// block's sum before the fold), the copy the sum's. A kernel that dropped
// the add, added before its last rounding or rounded another value fails.
TEST_F(CudaSequence, LayerNormGradientAddsTheShortcutsInItsPass) {
  const float eps = 1e-5f;
  for (int dim : {3, 64, 257}) {
    const int rows = 13;
    const Floats x = random_vector(at(rows, dim), 15), w = random_vector(dim, 16, 0.5f, 1.5f),
                 b = random_vector(dim, 17), dy = random_vector(at(rows, dim), 18),
                 add = random_vector(at(rows, dim), 19);
    for (dptrain::Backend* be : {gpu_.get(), cpu_.get()}) {
      SCOPED_TRACE(be->name() + " " + std::to_string(dim));
      auto& k = be->kernels<dptrain::SequenceKernels>();
      auto dx = upload(*be, x), dw = upload(*be, w), db = upload(*be, b), dg = upload(*be, dy),
           da = upload(*be, add);
      DeviceBuffer<float> y(*be, x.size()), mean(*be, rows), rstd(*be, rows), plain(*be, x.size()),
          summed(*be, x.size()), fused(*be, x.size());
      DeviceBuffer<std::uint16_t> sum16(*be, x.size()), fused16(*be, x.size());
      k.layer_norm(dx.get(), dw.get(), db.get(), rows, dim, eps, y.get(), mean.get(), rstd.get());
      k.layer_norm_grad(dx.get(), dg.get(), dw.get(), mean.get(), rstd.get(), rows, dim,
                        plain.get());
      be->sum(plain.get(), da.get(), summed.get(), x.size(), sum16.get());
      k.layer_norm_grad(dx.get(), dg.get(), dw.get(), mean.get(), rstd.get(), rows, dim,
                        fused.get(), da.get(), fused16.get());
      EXPECT_EQ(download(*be, fused), download(*be, summed));
      EXPECT_EQ(download(*be, fused16), download(*be, sum16));
      EXPECT_NE(download(*be, fused), download(*be, plain));
    }
  }
}

// A layer norm handed only the bf16 slot (y null: the next part reads the
// copy alone) writes the copy it writes beside y, and the same statistics.
TEST_F(CudaSequence, LayerNormWritesItsCopyAloneWithTheSameBits) {
  const float eps = 1e-5f;
  for (int dim : {3, 64, 257}) {
    const int rows = 13;
    const Floats x = random_vector(at(rows, dim), 25), w = random_vector(dim, 26, 0.5f, 1.5f),
                 b = random_vector(dim, 27);
    for (dptrain::Backend* be : {gpu_.get(), cpu_.get()}) {
      SCOPED_TRACE(be->name() + " " + std::to_string(dim));
      auto& k = be->kernels<dptrain::SequenceKernels>();
      auto dx = upload(*be, x), dw = upload(*be, w), db = upload(*be, b);
      DeviceBuffer<float> y(*be, x.size()), mean(*be, rows), rstd(*be, rows), mean2(*be, rows),
          rstd2(*be, rows);
      DeviceBuffer<std::uint16_t> both16(*be, x.size()), alone16(*be, x.size());
      k.layer_norm(dx.get(), dw.get(), db.get(), rows, dim, eps, y.get(), mean.get(), rstd.get(),
                   both16.get());
      k.layer_norm(dx.get(), dw.get(), db.get(), rows, dim, eps, nullptr, mean2.get(),
                   rstd2.get(), alone16.get());
      EXPECT_EQ(download(*be, alone16), download(*be, both16));
      EXPECT_EQ(download(*be, mean2), download(*be, mean));
      EXPECT_EQ(download(*be, rstd2), download(*be, rstd));
    }
  }
}

// Above 64 rows the parameter gradients add chunks of 64 rows: another
// order than the CPU's, within rows·2^-24·Σ|term| per column (a bound on
// any summation order), and the same bits every run (the chunks are added
// by the last chunk block of each column block: one and three of them,
// the last with idle columns).
TEST_F(CudaSequence, LayerNormParameterGradientsOverChunks) {
  for (const int dim : {37, 600}) {
    const int rows = 1000;
    const Floats x = random_vector(at(rows, dim), 9), dy = random_vector(at(rows, dim), 10);
    const Floats mean = random_vector(rows, 11, -0.1f, 0.1f),
                 rstd = random_vector(rows, 12, 0.5f, 2.0f);
    auto run = [&](dptrain::Backend& be) {
      auto dx = upload(be, x), dg = upload(be, dy), dm = upload(be, mean), dr = upload(be, rstd);
      DeviceBuffer<float> gw(be, dim), gb(be, dim),
          work(be, be.kernels<dptrain::SequenceKernels>().layer_norm_workspace(rows, dim));
      be.kernels<dptrain::SequenceKernels>().layer_norm_param_grad(
          dx.get(), dg.get(), dm.get(), dr.get(), rows, dim, gw.get(), gb.get(), work.get());
      return std::vector<Floats>{download(be, gw), download(be, gb)};
    };
    const auto g = run(*gpu_), c = run(*cpu_);
    for (int col = 0; col < dim; ++col) {
      double abs_w = 0.0, abs_b = 0.0;
      for (int r = 0; r < rows; ++r) {
        const std::size_t i = at(r, dim) + col;
        abs_w += std::fabs(dy[i] * (x[i] - mean[r]) * rstd[r]);
        abs_b += std::fabs(dy[i]);
      }
      EXPECT_LE(std::fabs(g[0][col] - c[0][col]), rows * 0x1p-24 * abs_w) << "dweight " << col;
      EXPECT_LE(std::fabs(g[1][col] - c[1][col]), rows * 0x1p-24 * abs_b) << "dbias " << col;
    }
    EXPECT_EQ(g, run(*gpu_)) << "width " << dim;
  }
}

TEST_F(CudaSequence, HeadShufflesAreBitwiseTheCpus) {
  for (HeadShape s : {HeadShape{1, 1, 1, 1}, HeadShape{2, 5, 3, 7}, HeadShape{3, 33, 2, 16}}) {
    const std::size_t d = at(s.heads, s.head_dim), n = at(s.batch * s.tokens, static_cast<int>(d));
    const Floats qkv = random_vector(3 * n, 13), merged = random_vector(n, 14);
    auto run = [&](dptrain::Backend& be) {
      auto dqkv = upload(be, qkv), dm = upload(be, merged);
      DeviceBuffer<float> q(be, n), k(be, n), v(be, n), back(be, 3 * n), heads(be, n), joined(be, n);
      be.kernels<dptrain::SequenceKernels>().split_qkv(dqkv.get(), s, q.get(), k.get(), v.get());
      be.kernels<dptrain::SequenceKernels>().join_qkv(q.get(), k.get(), v.get(), s, back.get());
      be.kernels<dptrain::SequenceKernels>().split_heads(dm.get(), s, heads.get());
      be.kernels<dptrain::SequenceKernels>().merge_heads(heads.get(), s, joined.get());
      return std::vector<Floats>{download(be, q), download(be, k), download(be, v),
                                 download(be, back), download(be, heads), download(be, joined)};
    };
    const auto g = run(*gpu_), c = run(*cpu_);
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(same_values(g[i], c[i])) << "output " << i;
    EXPECT_EQ(g[3], qkv);  // join undoes split
    EXPECT_EQ(g[5], merged);
  }
}

// Softmax rows: exp is the device's expf, the CPU's a vectorized
// polynomial (both within about 1e-7 relative of e^x), the
// row sum a double in another order; p = e · (1/sum) is then within a few
// ulp of the CPU's: 1e-6 relative. The gradient's dot product likewise:
// dscores = scale · p · (dp − dot) within 1e-6 of scale·p·(|dp| + |dot|).
TEST_F(CudaSequence, AttentionSoftmaxAndGradientMatchTheCpu) {
  for (HeadShape s : {HeadShape{1, 1, 1, 1}, HeadShape{2, 33, 3, 4}, HeadShape{1, 70, 1, 8}})
    for (bool causal : {false, true}) {
      const std::size_t n = at(s.batch * s.heads * s.tokens, s.tokens);
      const Floats z = random_vector(n, 15, -4.0f, 4.0f), dp = random_vector(n, 16);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      auto run = [&](dptrain::Backend& be) {
        auto dz = upload(be, z), dg = upload(be, dp);
        DeviceBuffer<float> p(be, n), ds(be, n);
        be.kernels<dptrain::SequenceKernels>().attention_softmax(dz.get(), s, scale, causal,
                                                                 p.get());
        be.kernels<dptrain::SequenceKernels>().attention_softmax_grad(p.get(), dg.get(), s, scale,
                                                                      ds.get());
        return std::vector<Floats>{download(be, p), download(be, ds)};
      };
      const auto g = run(*gpu_), c = run(*cpu_);
      EXPECT_TRUE(all_close(g[0], c[0], 1e-6, 1e-12)) << "p, T " << s.tokens << " causal " << causal;
      EXPECT_TRUE(all_close(g[1], c[1], 1e-6, 1e-6 * scale)) << "dscores, T " << s.tokens;
      for (std::size_t i = 0; i < n && causal; ++i)
        if (i % s.tokens > (i / s.tokens) % s.tokens) ASSERT_EQ(g[0][i], 0.0f) << "masked p " << i;
      EXPECT_EQ(g, run(*gpu_));
    }
}

// The causal softmax never reads the masked half: NaN there changes
// nothing, and the in-place form (p == scores) gives the same values.
TEST_F(CudaSequence, CausalSoftmaxSkipsTheMaskedHalfAndWorksInPlace) {
  const HeadShape s{2, 37, 2, 5};
  const int t = s.tokens;
  const std::size_t n = at(s.batch * s.heads * t, t);
  Floats z = random_vector(n, 17, -3.0f, 3.0f);
  auto softmax = [&](const Floats& scores, bool in_place) {
    auto dz = upload(*gpu_, scores);
    DeviceBuffer<float> p(*gpu_, n);
    float* out = in_place ? dz.get() : p.get();
    gpu_->kernels<dptrain::SequenceKernels>().attention_softmax(dz.get(), s, 0.5f, true, out);
    return download(*gpu_, out, n);
  };
  const Floats clean = softmax(z, false);
  for (std::size_t i = 0; i < n; ++i)
    if (i % t > (i / t) % t) z[i] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(softmax(z, false), clean);
  EXPECT_EQ(softmax(z, true), clean);
}

TEST_F(CudaSequence, ImagesAsSequencesAndMeansAreBitwiseTheCpus) {
  for (int batch : {1, 3})
    for (int channels : {1, 5})
      for (int length : {1, 49}) {
        const Floats x = random_vector(at(batch * channels, length), 18);
        const Floats dy = random_vector(at(batch, channels), 19);
        auto run = [&](dptrain::Backend& be) {
          auto dx = upload(be, x), dg = upload(be, dy);
          DeviceBuffer<float> last(be, x.size()), first(be, x.size()), mean(be, dy.size()), back(be, x.size());
          be.kernels<dptrain::SequenceKernels>().channels_last(dx.get(), batch, channels, length,
                                                               last.get());
          be.kernels<dptrain::SequenceKernels>().channels_first(last.get(), batch, channels, length,
                                                                first.get());
          be.kernels<dptrain::SequenceKernels>().mean_positions(last.get(), batch, length, channels,
                                                                mean.get());
          be.kernels<dptrain::SequenceKernels>().mean_positions_grad(dg.get(), batch, length,
                                                                     channels, back.get());
          return std::vector<Floats>{download(be, last), download(be, first), download(be, mean),
                                     download(be, back)};
        };
        const auto g = run(*gpu_), c = run(*cpu_);
        for (std::size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(same_values(g[i], c[i])) << i;
        EXPECT_EQ(g[1], x);
      }
}

// Attention's products: batch strided GEMMs with row strides above the
// width and batch strides above the matrix, against the CPU's, within
// tol · Σ_l |a_il||b_lj| (the bound of test_gemm.cpp per precision).
void check_batched(dptrain::Precision precision, double tol) {
  auto gpu = gpu_test::make_gpu(precision);
  auto cpu = gpu_test::make_cpu();
  const int m = 33, n = 7, k = 37, batch = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const std::size_t sa = at(ta ? k : m, lda) + 5, sb = at(tb ? n : k, ldb) + 2, sc = at(m, ldc) + 4;
      const Floats a = random_vector(sa * batch, 20), b = random_vector(sb * batch, 21),
                   c0 = random_vector(sc * batch, 22);
      auto run = [&](dptrain::Backend& be) {
        auto da = upload(be, a), db = upload(be, b), dc = upload(be, c0);
        be.gemm_batched(ta, tb, m, n, k, 0.7f, da.get(), lda, sa, db.get(), ldb, sb, 0.3f,
                        dc.get(), ldc, sc, batch);
        return download(be, dc);
      };
      const Floats g = run(*gpu), c = run(*cpu);
      for (int i = 0; i < batch; ++i)
        for (int r = 0; r < m; ++r)
          for (int col = 0; col < n; ++col) {
            double bound = std::fabs(0.3 * c0[i * sc + at(r, ldc) + col]);
            for (int l = 0; l < k; ++l) {
              const float av = a[i * sa + (ta ? at(l, lda) + r : at(r, lda) + l)];
              const float bv = b[i * sb + (tb ? at(col, ldb) + l : at(l, ldb) + col)];
              bound += 0.7 * std::fabs(av * bv);
            }
            const std::size_t idx = i * sc + at(r, ldc) + col;
            ASSERT_LE(std::fabs(g[idx] - c[idx]), tol * bound + 1e-6)
                << "ta " << ta << " tb " << tb << " batch " << i << " C[" << r << "," << col << "]";
          }
      // Outside the matrices nothing is written.
      for (std::size_t i = 0; i < g.size(); ++i)
        if (static_cast<int>(i % sc % ldc) >= n || i % sc >= at(m, ldc)) ASSERT_EQ(g[i], c0[i]) << i;
    }
}

TEST(CudaBatchedGemm, Fp32MatchesCpu) { check_batched(dptrain::Precision::kFp32, 1e-5); }
TEST(CudaBatchedGemm, Tf32WithinTf32Error) { check_batched(dptrain::Precision::kTf32, 4e-3); }
TEST(CudaBatchedGemm, Bf16WithinBf16Error) { check_batched(dptrain::Precision::kBf16, 1.6e-2); }

}  // namespace
