// Tests: the activation arena's layout (saved buffers kept side by side,
// per-pass buffers shared by the top-level layers, recomputed layers'
// saved buffers in the shared region too), the model's plan against the
// bytes a model of that many rows really allocates, and a recomputed
// backward against the plain one, bit for bit, on the CPU backend.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/activation_arena.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kA = ActivationArena::kAlignment;

RowBytes per_row(std::size_t bytes) {
  return [bytes](int rows) { return std::size_t(rows) * bytes; };
}

// Two layers: layer 0 saves 2 units a row and needs 1 a pass, layer 1 saves
// 3 and needs 4; the model keeps 1 of its own. A unit is the alignment, so
// the arithmetic below is in units.
ActivationArena two_layers() {
  ActivationArena a;
  a.begin_layer(0, true, true);
  a.reserve(per_row(2 * kA), Lifetime::kSaved);
  a.reserve(per_row(1 * kA), Lifetime::kPass);
  a.begin_layer(1, true, true);
  a.reserve(per_row(3 * kA), Lifetime::kSaved);
  a.reserve(per_row(4 * kA), Lifetime::kPass);
  a.begin_model_scope();
  a.reserve(per_row(1 * kA), Lifetime::kSaved);
  return a;
}

TEST(ActivationArena, SavedSideBySidePassShared) {
  const ActivationArena a = two_layers();
  // Without recomputation: model 1 + saved 2 + 3, one shared region of
  // max(1, 4) for the passes; all but the region is kept.
  EXPECT_EQ(a.bytes(1, false).total, (1 + 2 + 3 + 4) * kA);
  EXPECT_EQ(a.bytes(1, false).saved, (1 + 2 + 3) * kA);
  EXPECT_EQ(a.bytes(5, false).total, 5 * (1 + 2 + 3 + 4) * kA);
  // With it: model 1, and a region of max(2 + 1, 3 + 4); kept: the model's
  // and one layer's saved buffers at a time, the larger.
  EXPECT_EQ(a.bytes(1, true).total, (1 + 7) * kA);
  EXPECT_EQ(a.bytes(1, true).saved, (1 + 3) * kA);
  EXPECT_TRUE(a.recomputes(0, true) && a.recomputes(1, true));
  EXPECT_FALSE(a.recomputes(0, false));
}

TEST(ActivationArena, LayersWithoutBackwardOrRecomputeKeepWhatTheyMust) {
  ActivationArena a;
  a.begin_layer(0, false, true);  // never runs backward: its saved buffer is a pass's
  a.reserve(per_row(2 * kA), Lifetime::kSaved);
  a.begin_layer(1, true, false);  // cannot run forward again: kept
  a.reserve(per_row(3 * kA), Lifetime::kSaved);
  a.begin_layer(2, true, true);  // only per-pass buffers: nothing to recompute
  a.reserve(per_row(5 * kA), Lifetime::kPass);
  for (const bool recompute : {false, true}) {
    EXPECT_EQ(a.bytes(1, recompute).total, (3 + 5) * kA) << recompute;
    EXPECT_EQ(a.bytes(1, recompute).saved, 3 * kA) << recompute;
    for (std::size_t layer = 0; layer < 3; ++layer) EXPECT_FALSE(a.recomputes(layer, recompute));
  }
}

TEST(ActivationArena, BuffersAreAlignedAndDisjoint) {
  auto be = make_cpu_backend(BackendOptions{});
  ActivationArena a;
  a.begin_layer(0, true, true);
  const std::size_t s0 = a.reserve(per_row(3), Lifetime::kSaved);  // 3 bytes a row
  const std::size_t p0 = a.reserve(per_row(5), Lifetime::kPass);
  a.begin_layer(1, true, true);
  const std::size_t s1 = a.reserve(per_row(7), Lifetime::kSaved);
  const std::size_t p1 = a.reserve(per_row(2), Lifetime::kPass);
  a.allocate(*be, 10, false);
  EXPECT_THROW(a.reserve(per_row(1), Lifetime::kPass), Error);  // laid out already
  auto at = [&](std::size_t slot) { return static_cast<char*>(a.address(slot)); };
  // Offsets from the arena's start (which is as aligned as the backend's
  // allocations are: 256 bytes on CUDA).
  for (std::size_t slot : {s0, p0, s1, p1}) EXPECT_EQ((at(slot) - at(s0)) % kA, 0) << slot;
  EXPECT_NE(at(s0), at(s1));
  EXPECT_EQ(at(p0), at(p1));  // the shared region
  EXPECT_GE(at(p0), at(s1) + 70);
}

// A model's plan for R rows, built for 1 row, is what a model built for R
// rows allocates, with and without recomputation.
// keeps_less: recomputation keeps less (more than one layer saves buffers).
void expect_plan_is_allocation(const char* spec, const Shape& input, int vocab, bool keeps_less) {
  auto be = make_cpu_backend(BackendOptions{});
  const auto specs = parse_model_spec(spec);
  Model one(*be, specs, input, 1, vocab);
  // A model that only plans allocates neither arenas nor activations (only
  // what layers hold per channel), plans alike, and runs nothing.
  const std::size_t held = be->buffer_bytes();
  Model plan(*be, specs, input, 1, vocab, Recompute::kNone, ModelStorage::kPlanOnly);
  EXPECT_LE(be->buffer_bytes() - held, 1024u) << spec;
  EXPECT_THROW(plan.init(1), Error);
  EXPECT_THROW(plan.forward(nullptr, 1), Error);
  for (const Recompute how : {Recompute::kNone, Recompute::kBlocks})
    for (const int rows : {1, 3, 17}) {
      const std::size_t before = be->buffer_bytes();
      Model m(*be, specs, input, rows, vocab, how);
      const std::size_t params = 2 * m.num_params() + m.num_buffers();
      EXPECT_EQ(be->buffer_bytes() - before - params * sizeof(float), m.activation_bytes())
          << spec << " rows " << rows;
      EXPECT_EQ(one.activation_plan(rows, how).total(), m.activation_bytes())
          << spec << " rows " << rows << " recompute " << (how == Recompute::kBlocks);
      EXPECT_EQ(plan.activation_plan(rows, how).total(), m.activation_bytes()) << spec;
    }
  const std::size_t recomputed = one.activation_plan(8, Recompute::kBlocks).kept;
  const std::size_t kept = one.activation_plan(8, Recompute::kNone).kept;
  if (keeps_less) EXPECT_LT(recomputed, kept) << spec;
  else EXPECT_EQ(recomputed, kept) << spec;
}

TEST(ModelPlan, EqualsWhatAModelOfThoseRowsAllocates) {
  expect_plan_is_allocation(
      "embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dropout:0.1,dense:16)),ln,"
      "dense:20",
      Shape{9}, 20, true);
  expect_plan_is_allocation("conv:4:3:1:1,bn,relu,res(conv:4:3:1:1,bn,relu,dropout:0.2),"
                            "res(conv:6:3:2:1,bn),maxpool:2,flatten,dense:3",
                            Shape{2, 8, 8}, 0, true);
  // One layer saves (dropout's mask): recomputing it keeps as much.
  expect_plan_is_allocation("dense:17,tanh,dropout:0.3,dense:3", Shape{6}, 0, false);
}

// A block keeps a part's output for backward only where a backward reads
// it (Layer::backward_reads_output / backward_reads_input). In
// res(dense:8,tanh,dense:8): the first dense's output is tanh's input,
// which tanh's backward does not read (it takes the derivative from its
// output), so it lives for a pass; tanh's output is read by its own
// backward and kept; the last dense's output (the block's f) is read by no
// backward. The model keeps every top-level output. 64 rows: every buffer
// a multiple of the alignment, so the plan is the sum.
TEST(ModelPlan, ABlockKeepsOnlyTheOutputsABackwardReads) {
  auto be = make_cpu_backend(BackendOptions{});
  const int rows = 64;
  Model m(*be, parse_model_spec("dense:8,res(dense:8,tanh,dense:8),dense:3"), Shape{5}, rows);
  const std::size_t model_outputs = 8 + 8 + 3, block_outputs = 8;  // floats a row
  EXPECT_EQ(m.activation_plan(rows, Recompute::kNone).kept,
            (model_outputs + block_outputs) * rows * sizeof(float));
  // With relu, whose backward reads its input, the first dense's output is
  // kept, and relu's too: the next dense's weight gradient reads it (fp32).
  Model r(*be, parse_model_spec("dense:8,res(dense:8,relu,dense:8),dense:3"), Shape{5}, rows);
  EXPECT_EQ(r.activation_plan(rows, Recompute::kNone).kept,
            (model_outputs + 2 * block_outputs) * rows * sizeof(float));
}

// A bn runs the relu after it in its passes (Layer::absorbs_next), so the
// model reserves no output for that bn, where a bn before tanh keeps one.
// 64 rows, as above.
TEST(ModelPlan, ABnWithTheReluAfterItKeepsNoOutputOfItsOwn) {
  auto be = make_cpu_backend(BackendOptions{});
  const int rows = 64;
  const auto kept = [&](const char* spec) {
    return Model(*be, parse_model_spec(spec), Shape{5}, rows)
        .activation_plan(rows, Recompute::kNone)
        .kept;
  };
  const std::size_t bn_output = 8 * rows * sizeof(float);
  EXPECT_EQ(kept("dense:8,bn,relu,dense:3") + bn_output, kept("dense:8,bn,tanh,dense:3"));
  EXPECT_EQ(kept("dense:8,bn:local,relu,dense:3") + bn_output,
            kept("dense:8,bn:local,tanh,dense:3"));
  // A relu after any other layer runs as its own layer.
  EXPECT_EQ(kept("dense:8,relu,dense:3"), kept("dense:8,tanh,dense:3"));
  // Inside a block: the bn's output is not stored, and the relu's is kept
  // (the bn's backward reads it), where before tanh the bn's is kept (tanh
  // reads its output: the same bytes) and tanh's too (the dense's input).
  EXPECT_EQ(kept("dense:8,res(dense:8,bn,relu,dense:8),dense:3") + bn_output,
            kept("dense:8,res(dense:8,bn,tanh,dense:8),dense:3"));
  // Last in the body: the relu's output is the block's f, kept for the bn.
  EXPECT_EQ(kept("dense:8,res(dense:8,bn,relu),dense:3") + bn_output,
            kept("dense:8,res(dense:8,bn,tanh),dense:3"));
}

std::vector<float> download(Backend& be, const float* p, std::size_t n) {
  std::vector<float> out(n);
  be.copy_to_host(out.data(), p, n * sizeof(float));
  return out;
}

// One forward and backward of the same batch with and without
// recomputation: the same gradients and input-side results, bit for bit.
TEST(ModelRecompute, SameGradientsBitForBit) {
  auto be = make_cpu_backend(BackendOptions{});
  const auto specs = parse_model_spec(
      "embed:16,pos,res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dropout:0.2,dense:16),ln,"
      "dense:20");
  const int rows = 5, tokens = 7;
  // Token ids travel as int32 bit patterns in the float input.
  std::vector<std::int32_t> ids(std::size_t(rows) * tokens);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 7 + 3) % 20);
  std::vector<std::vector<float>> grads, outs;
  for (const Recompute how : {Recompute::kNone, Recompute::kBlocks}) {
    Model m(*be, specs, Shape{tokens}, rows, 20, how);
    m.init(3);
    m.set_step({11, 2, 40, 0, nullptr});
    DeviceBuffer<float> x(*be, ids.size());
    be->copy_to_device(x.get(), ids.data(), ids.size() * sizeof(std::int32_t));
    const float* y = m.forward(x.get(), rows);
    const std::size_t n_out = std::size_t(rows) * m.output_dim();
    outs.push_back(download(*be, y, n_out));
    // Any fixed gradient of the output will do.
    std::vector<float> dy(n_out);
    for (std::size_t i = 0; i < n_out; ++i) dy[i] = float(int(i % 13) - 6) / 64.0f;
    be->copy_to_device(m.output_grad(), dy.data(), n_out * sizeof(float));
    m.backward(x.get(), m.output_grad(), rows);
    grads.push_back(download(*be, m.grads(), m.num_params()));
  }
  EXPECT_EQ(outs[0], outs[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)));
  double norm = 0;
  for (float g : grads[0]) norm += double(g) * g;
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace dptrain
