// Implements: the checks of `--attention cudnn` (cudnn/cudnn_attention_kernels.cpp).
//
// Every pass also asks for the bf16 copies of o and dqkv, which must be
// the roundings of the fp32 results bit for bit, fallbacks included; and
// passes with the copies alone (no fp32 o or dqkv, the attention layer's
// way under bf16) take the same paths.
//
// On the host emulation (tests/emulated/), whose cuDNN has no engines, the
// table must say once on stderr that cuDNN cannot run the shape, however
// many steps and shapes follow, and give the fused kernels' bits: o, lse and
// dqkv equal bit for bit to `--attention fused`'s. With the emulation's
// engine that computes nothing switched on, the first-use check must catch
// the wrong forward, say so once and give the fused bits as well. Under
// fp32 it says once that cuDNN's attention is bf16 only and is the fused
// table.
//
// On a real GPU (these tests skip on the emulation; the emulated ones skip
// there): cuDNN's forward o, lse and backward dqkv against the fused
// kernels in bf16, causal and not, hd 64 and 128, T not a multiple of 64,
// and a second run the same bits. The bounds, against each tensor's largest
// magnitude m; u = 2^-9 ≈ 2e-3, bf16's relative rounding. Both read the
// same bf16 q, k, v. o = Σ p v: the two round their own p to bf16 (p ≤ 1,
// Σ p = 1: at most u·m each) and cuDNN rounds o itself to bf16 (u·m): 3u·m
// ≈ 6e-3·m, bound 1e-2·m. lse: fp32 sums of the same bf16 products and
// fp32 exp/log, in other orders: relative errors of a few 2^-24 per term,
// bound 1e-4·m. dqkv: do, o, p and ds rounded to bf16 (a few u each) in
// products summed over T, and the result rounded to bf16: the bound the
// fused kernels' own bf16 test uses against the CPU, 3e-2·m.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"
#include "gpu_env.hpp"
#if defined(DPTRAIN_EMULATED_DEVICE)
#include <cudnn.h>  // the emulation's: dptrain_emu::cudnn_graph_engines()
#endif

namespace {

using dptrain::AttentionImpl;
using dptrain::DeviceBuffer;
using dptrain::HeadShape;
using dptrain::Precision;
using Floats = std::vector<float>;

struct Case {
  HeadShape shape;
  bool causal;
};

std::size_t heads_values(const HeadShape& s) {
  return static_cast<std::size_t>(s.batch) * s.tokens * s.heads * s.head_dim;
}

// One forward and backward of the attention table on fixed inputs, with
// the bf16 copies of o and dqkv asked for (the attention layer's, under
// --precision bf16); `copies`: each copy is its tensor's rounding, bit
// for bit, where the buffers started as NaNs.
struct Pass {
  Floats o, lse, dqkv;
  bool copies = false;
};

using gpu_test::is_bf16_rounding;
using gpu_test::kNotWritten;

// The values of a bf16 copy; `written`: none is kNotWritten.
Floats values_of(const std::vector<std::uint16_t>& bits, bool* written) {
  Floats v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    v[i] = dptrain::bf16_value(bits[i]);
    if (bits[i] == kNotWritten) *written = false;
  }
  return v;
}

// `alone`: o, do and dqkv in their bf16 copies alone (no fp32 buffers, as
// the attention layer keeps them under bf16; do's copy is its rounding);
// the Pass's o and dqkv are then the copies' values, and `copies` says
// that every value was written.
Pass run_pass(dptrain::Backend& be, const Case& c, bool alone = false) {
  const HeadShape& s = c.shape;
  dptrain::FusedAttentionKernels* k = be.find_kernels<dptrain::FusedAttentionKernels>();
  EXPECT_NE(k, nullptr);
  if (!k) return {};
  const std::size_t n = heads_values(s), rows = n / static_cast<std::size_t>(s.head_dim);
  const auto qkv = gpu_test::upload(be, gpu_test::random_vector(3 * n, 11));
  const Floats d_o_host = gpu_test::random_vector(n, 12);
  const auto d_o = gpu_test::upload(be, d_o_host);
  const auto d_o16 = gpu_test::upload(be, gpu_test::bf16_bits_of(d_o_host));
  DeviceBuffer<float> o(be, n), lse(be, rows), rowdot(be, rows), dqkv(be, 3 * n);
  auto o16 = gpu_test::upload(be, std::vector<std::uint16_t>(n, kNotWritten));
  auto dqkv16 = gpu_test::upload(be, std::vector<std::uint16_t>(3 * n, kNotWritten));
  float* o32 = alone ? nullptr : o.get();
  float* dqkv32 = alone ? nullptr : dqkv.get();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  k->forward(qkv.get(), s, scale, c.causal, o32, lse.get(), o16.get());
  const dptrain::GemmOperand dout =
      alone ? dptrain::GemmOperand(nullptr, d_o16.get()) : dptrain::GemmOperand(d_o.get());
  k->backward(qkv.get(), o32, lse.get(), dout, s, scale, c.causal, rowdot.get(), dqkv32,
              o16.get(), dqkv16.get());
  if (alone) {
    Pass p{{}, gpu_test::download(be, lse), {}, true};
    p.o = values_of(gpu_test::download(be, o16), &p.copies);
    p.dqkv = values_of(gpu_test::download(be, dqkv16), &p.copies);
    return p;
  }
  Pass p{gpu_test::download(be, o), gpu_test::download(be, lse), gpu_test::download(be, dqkv)};
  p.copies = is_bf16_rounding(gpu_test::download(be, o16), p.o) &&
             is_bf16_rounding(gpu_test::download(be, dqkv16), p.dqkv);
  return p;
}

bool same_bits(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

constexpr const char* kFallbackNote = "cuDNN cannot run attention";

#if defined(DPTRAIN_EMULATED_DEVICE)

const std::vector<Case> kEmulatedCases{{{2, 37, 2, 16}, true}, {{1, 20, 1, 32}, false}};

// Runs the cases `steps` times on a bf16 cudnn table, each result checked
// bitwise against a fused table's; returns what the cudnn table said on
// stderr. The cudnn table is left in *table.
std::string expect_fused_bits(const std::vector<Case>& cases, int steps,
                              std::unique_ptr<dptrain::Backend>* table, bool alone = false) {
  auto cudnn = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kCudnn);
  auto fused = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kFused);
  testing::internal::CaptureStderr();
  for (int step = 0; step < steps; ++step)
    for (const Case& c : cases) {
      const Pass got = run_pass(*cudnn, c, alone), want = run_pass(*fused, c, alone);
      EXPECT_TRUE(same_bits(got.o, want.o)) << "step " << step;
      EXPECT_TRUE(same_bits(got.lse, want.lse)) << "step " << step;
      EXPECT_TRUE(same_bits(got.dqkv, want.dqkv)) << "step " << step;
      EXPECT_TRUE(got.copies) << "step " << step << ": the bf16 copies of o and dqkv";
      EXPECT_TRUE(want.copies) << "step " << step << ": the fused kernels' bf16 copies";
    }
  if (table) *table = std::move(cudnn);
  return testing::internal::GetCapturedStderr();
}

// The emulation's cuDNN engine switches for one test, however it ends: an
// engine offered, and it failing or varying its output where asked.
struct EngineSwitches {
  explicit EngineSwitches(bool fails = false, bool varies = false) { set(true, fails, varies); }
  ~EngineSwitches() { set(false, false, false); }
  static void set(bool engines, bool fails, bool varies) {
    dptrain_emu::cudnn_graph_engines() = engines;
    dptrain_emu::cudnn_graph_execution_fails() = fails;
    dptrain_emu::cudnn_graph_execution_varies() = varies;
  }
};

TEST(CudnnAttention, EmulationFallsBackOnceToTheFusedBits) {
  const std::string err = expect_fused_bits(kEmulatedCases, 3, nullptr);
  EXPECT_EQ(count(err, kFallbackNote), 1) << err;
  EXPECT_EQ(count(err, "\n"), 1) << err;  // one line, nothing else
  // Both graphs, forward and backward, were taken up to the heuristics,
  // and the line gives each pass's reason.
  EXPECT_EQ(count(err, "no engines for backend graphs"), 2) << err;
  EXPECT_EQ(count(err, "its backward: "), 1) << err;
}

// The first-use check. With the emulation's engine switched on, cuDNN's
// plans are made and executed but compute nothing: the check finds the
// first forward's o off the fused kernels', says so once, puts the fused
// results in its place and runs that pass fused from then on, and then
// the same for the first backward's dqkv (the passes are checked apart),
// so every result, the first ones included, has the fused kernels' bits.
TEST(CudnnAttention, FirstRunThatDisagreesWithFusedIsReplacedAndSaidOnce) {
  const EngineSwitches offering;
  std::unique_ptr<dptrain::Backend> cudnn;
  const std::string err = expect_fused_bits(kEmulatedCases, 2, &cudnn);
  EXPECT_EQ(count(err, kFallbackNote), 2) << err;  // once a pass
  EXPECT_EQ(count(err, "its forward differs from the fused kernels'"), 1) << err;
  EXPECT_EQ(count(err, "its backward differs from the fused kernels'"), 1) << err;
  EXPECT_EQ(cudnn->find_kernels<dptrain::FusedAttentionKernels>()->implementation(),
            "fused-fallback");
}

// A backward whose two first runs differ in a bit (the emulation's engine
// writing a new pattern each time) is replaced by the fused kernels as one
// whose results are off, and said so.
TEST(CudnnAttention, FirstBackwardThatDoesNotRepeatIsReplaced) {
  const EngineSwitches varying(false, true);
  const std::string err = expect_fused_bits({kEmulatedCases[0]}, 2, nullptr);
  EXPECT_EQ(count(err, kFallbackNote), 2) << err;
  EXPECT_EQ(count(err, "its backward is not deterministic"), 1) << err;
  EXPECT_EQ(count(err, "its backward differs"), 0) << err;
}

// The same with o and dqkv in their bf16 copies alone (the attention
// layer's way under bf16): the first-use check reads cuDNN's o from the
// copy, and the fused kernels that replace it write the copies alone.
TEST(CudnnAttention, CopiesAloneAreCheckedAndReplacedTheSameWay) {
  const EngineSwitches offering;
  const std::string err = expect_fused_bits(kEmulatedCases, 2, nullptr, true);
  EXPECT_EQ(count(err, kFallbackNote), 2) << err;
  EXPECT_EQ(count(err, "its forward differs from the fused kernels'"), 1) << err;
  EXPECT_EQ(count(err, "its backward differs from the fused kernels'"), 1) << err;
}

// A plan that finalizes and then fails to execute (the emulation's engine
// set to answer CUDNN_STATUS_EXECUTION_FAILED): the first run's error is
// said once and the shape runs fused, the run going on.
TEST(CudnnAttention, FirstExecutionThatFailsIsSaidOnceAndRunsFused) {
  const EngineSwitches failing(true);
  const std::string err = expect_fused_bits({kEmulatedCases[0]}, 2, nullptr);
  EXPECT_EQ(count(err, kFallbackNote), 2) << err;
  EXPECT_EQ(count(err, "its first forward failed"), 1) << err;
  EXPECT_EQ(count(err, "its first backward failed"), 1) << err;
  EXPECT_EQ(count(err, "CUDNN_STATUS_EXECUTION_FAILED"), 2) << err;
}

TEST(CudnnAttention, Fp32SaysOnceThatItIsBf16Only) {
  testing::internal::CaptureStderr();
  auto cudnn = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kCudnn);
  auto fused = gpu_test::make_gpu(Precision::kFp32, AttentionImpl::kFused);
  const Case c{{1, 9, 2, 8}, true};
  const Pass got = run_pass(*cudnn, c), want = run_pass(*fused, c);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "bf16 only"), 1) << err;
  EXPECT_EQ(count(err, kFallbackNote), 0) << err;
  EXPECT_TRUE(same_bits(got.o, want.o));
  EXPECT_TRUE(same_bits(got.dqkv, want.dqkv));
  EXPECT_TRUE(got.copies && want.copies);
}

#else

float largest(const Floats& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::string label(const Case& c) {
  return "T " + std::to_string(c.shape.tokens) + ", hd " + std::to_string(c.shape.head_dim) +
         (c.causal ? ", causal" : "");
}

// A pass on cuDNN's table; `ran`: cuDNN's own, for on a GPU a fallback is a
// failure of the cuDNN path (its note on stderr says why).
Pass cudnn_pass(dptrain::Backend& be, const Case& c, bool alone, bool* ran) {
  testing::internal::CaptureStderr();
  Pass p = run_pass(be, c, alone);
  const std::string err = testing::internal::GetCapturedStderr();
  *ran = count(err, kFallbackNote) == 0;
  EXPECT_TRUE(*ran) << err;
  return p;
}

TEST(CudnnAttention, Bf16MatchesTheFusedKernels) {
  const std::vector<Case> cases{{{2, 70, 2, 64}, true},
                                {{2, 100, 3, 64}, false},
                                {{1, 130, 2, 128}, true},
                                {{2, 37, 1, 128}, false}};
  auto cudnn = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kCudnn);
  auto fused = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kFused);
  for (const Case& c : cases) {
    SCOPED_TRACE(label(c));
    bool ran = false;
    const Pass got = cudnn_pass(*cudnn, c, false, &ran);
    if (!ran) continue;
    const Pass want = run_pass(*fused, c);
    EXPECT_TRUE(gpu_test::all_close(got.o, want.o, 0.0, 1e-2 * largest(want.o)));
    EXPECT_TRUE(gpu_test::all_close(got.lse, want.lse, 0.0, 1e-4 * largest(want.lse)));
    EXPECT_TRUE(gpu_test::all_close(got.dqkv, want.dqkv, 0.0, 3e-2 * largest(want.dqkv)));
    // And not the fused kernels under another name: some difference.
    EXPECT_FALSE(same_bits(got.dqkv, want.dqkv));
    EXPECT_TRUE(got.copies) << "cuDNN's bf16 o and dqkv are not the roundings of its fp32 ones";
    EXPECT_TRUE(want.copies) << "the fused kernels' bf16 o and dqkv";
    const Pass again = run_pass(*cudnn, c);
    EXPECT_TRUE(same_bits(got.o, again.o));
    EXPECT_TRUE(same_bits(got.lse, again.lse));
    EXPECT_TRUE(same_bits(got.dqkv, again.dqkv)) << "the backward plan is not deterministic";
  }
}

// o and dqkv in their bf16 copies alone, on tables that meet each shape
// for the first time (so the first-use checks read the copies): cuDNN's
// copies against the fused kernels', within the bounds above, and equal to
// the copies cuDNN writes beside fp32 buffers.
TEST(CudnnAttention, Bf16CopiesAloneMatchTheFusedKernels) {
  const std::vector<Case> cases{{{2, 70, 2, 64}, true}, {{1, 130, 2, 128}, false}};
  auto cudnn = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kCudnn);
  auto fused = gpu_test::make_gpu(Precision::kBf16, AttentionImpl::kFused);
  for (const Case& c : cases) {
    SCOPED_TRACE(label(c));
    bool ran = false;
    const Pass got = cudnn_pass(*cudnn, c, true, &ran);
    if (!ran) continue;
    EXPECT_TRUE(got.copies) << "cuDNN left values of its bf16 o or dqkv unwritten";
    const Pass want = run_pass(*fused, c, true);
    EXPECT_TRUE(gpu_test::all_close(got.o, want.o, 0.0, 1e-2 * largest(want.o)));
    EXPECT_TRUE(gpu_test::all_close(got.dqkv, want.dqkv, 0.0, 3e-2 * largest(want.dqkv)));
    const Pass beside = run_pass(*cudnn, c);
    EXPECT_TRUE(same_bits(got.o, gpu_test::values_of_bf16(beside.o)));
    EXPECT_TRUE(same_bits(got.dqkv, gpu_test::values_of_bf16(beside.dqkv)));
  }
}

#endif

}  // namespace
