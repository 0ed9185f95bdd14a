// Implements: the tests of the model's bf16 twin of its parameters
// (ParamsBf16, Model::params_bf16_for_update): where the backend rounds GEMM
// operands (CUDA under --precision bf16), the model keeps every parameter
// rounded to bf16 and the layers' GEMMs read their weights there, so no
// layer rounds a weight of its own in any pass.
//
// Checked here: the twin is the rounding of the parameters, bit for bit,
// after init, after a write through Model::params() and after optimizer
// steps that write it in their own pass (SGD and AdamW, through the
// replicated strategy's update); the layers read the twin and not the fp32
// weights (a twin holding 2·W doubles a bias-free product exactly, where a
// layer rounding W itself would not); a run with the twin ends with the bits
// of a run that rounds in every forward; where the model keeps one at all
// (bf16 on CUDA, whole arenas) and what it costs in the plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "gpu_env.hpp"
#include "parallel/replicated_sync.hpp"
#include "training_support.hpp"

namespace {

using dptrain::Backend;
using dptrain::Model;
using dptrain::ModelStorage;
using dptrain::Precision;
using gpu_test::download;
using gpu_test::is_bf16_rounding;
using gpu_test::upload;

constexpr int kRows = 12, kIn = 16, kClasses = 8;
// Every tensor's offset a multiple of 8 values, so that every weight reads
// its copy from the twin (ParamOperand): 16·32 + 32 + 32·32 + 32 + 32·8 + 8.
constexpr const char* kSpec = "dense:32,gelu:tanh,dense:32,relu,dense:8";

std::unique_ptr<Model> make_model(Backend& be, const char* spec = kSpec,
                                  ModelStorage storage = ModelStorage::kAllocated) {
  auto m = std::make_unique<Model>(be, dptrain::parse_model_spec(spec), dptrain::Shape{kIn},
                                   kRows, 0, dptrain::Recompute::kNone, storage);
  if (storage == ModelStorage::kAllocated) m->init(5);
  return m;
}

// One rank: the replicated strategy's update makes no collective call.
class OneRank final : public dptrain::Communicator {
 public:
  std::string name() const override { return "one rank"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, std::size_t) override {}
  void allreduce_host_sum(double*, std::size_t) override {}
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
};

std::vector<std::uint16_t> twin_of(Backend& be, Model& m) {
  return download(be, m.params_bf16(), m.num_params());
}
std::vector<float> params_of(Backend& be, const Model& m) {
  return download(be, m.params(), m.num_params());
}

// One forward and backward of x with labels y; the step's gradients are
// left in the model's arena.
void forward_backward(Backend& be, Model& m, const std::vector<float>& x,
                      const std::vector<std::int32_t>& y) {
  auto dx = upload(be, x);
  auto dy = upload(be, y);
  dptrain::DeviceBuffer<float> stats(be, 2);
  be.fill(stats.get(), 0.0f, 2);
  const float* logits = m.forward(dx.get(), kRows);
  be.kernels<dptrain::LossKernels>().softmax_xent(logits, dy.get(), kRows, kClasses,
                                                  1.0f / kRows, m.output_grad(), stats.get());
  m.backward(dx.get(), m.output_grad(), kRows);
}

TEST(ParamsBf16, OnlyBf16OnCudaWithWholeArenasKeepsATwin) {
  auto bf16 = gpu_test::make_gpu(Precision::kBf16);
  auto m = make_model(*bf16);
  EXPECT_NE(m->params_bf16(), nullptr);
  EXPECT_EQ(m->params_bf16_bytes(), m->num_params() * sizeof(std::uint16_t));
  // Planning counts it; --shard-params gathers units and keeps none.
  EXPECT_EQ(make_model(*bf16, kSpec, ModelStorage::kPlanOnly)->params_bf16_bytes(),
            m->params_bf16_bytes());
  for (ModelStorage s : {ModelStorage::kShardedParams, ModelStorage::kPlanOnlyShardedParams})
    EXPECT_EQ(make_model(*bf16, kSpec, s)->params_bf16_bytes(), 0u);
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    auto gpu = gpu_test::make_gpu(p);
    EXPECT_EQ(make_model(*gpu)->params_bf16(), nullptr);
  }
  auto cpu = gpu_test::make_cpu();
  EXPECT_EQ(make_model(*cpu)->params_bf16_bytes(), 0u);
}

// No weight's copy is kept from forward to backward, with the twin or
// without it (--shard-params): what is kept grows with the rows alone (at
// 64 and 128 rows every buffer is whole 256-byte units, so a plan with no
// buffer of a fixed size keeps exactly twice as much at 128).
TEST(ParamsBf16, NoWeightCopyIsKeptForBackward) {
  auto bf16 = gpu_test::make_gpu(Precision::kBf16);
  for (ModelStorage s : {ModelStorage::kPlanOnly, ModelStorage::kPlanOnlyShardedParams}) {
    auto m = make_model(*bf16, kSpec, s);
    const auto kept = [&](int rows) {
      return m->activation_plan(rows, dptrain::Recompute::kNone).kept;
    };
    EXPECT_GT(kept(64), 0u);
    EXPECT_EQ(kept(128), 2 * kept(64)) << (s == ModelStorage::kPlanOnly ? "twin" : "sharded");
  }
}

TEST(ParamsBf16, IsTheParametersRoundingAfterEachChange) {
  auto be = gpu_test::make_gpu(Precision::kBf16);
  auto m = make_model(*be);
  const auto x = gpu_test::random_vector(std::size_t(kRows) * kIn, 11);
  const auto y = gpu_test::random_labels(kRows, kClasses, 12);
  forward_backward(*be, *m, x, y);
  EXPECT_TRUE(is_bf16_rounding(twin_of(*be, *m), params_of(*be, *m))) << "after init";

  // A write through params() leaves the twin to the next forward.
  const auto fresh = gpu_test::random_vector(m->num_params(), 13);
  be->copy_to_device(m->params(), fresh.data(), fresh.size() * sizeof(float));
  forward_backward(*be, *m, x, y);
  EXPECT_TRUE(is_bf16_rounding(twin_of(*be, *m), fresh)) << "after a write";

  // Steps of the replicated strategy write it in the optimizer's pass.
  OneRank comm;
  dptrain::ReplicatedSync sync(*be, comm, *m, nullptr);
  for (dptrain::OptimizerKind kind : {dptrain::OptimizerKind::kSgd,
                                      dptrain::OptimizerKind::kAdamW}) {
    dptrain::OptimizerConfig cfg;
    cfg.kind = kind;
    cfg.momentum = 0.9f;
    cfg.weight_decay = 0.01f;
    dptrain::Optimizer opt(*be, cfg, m->num_params());
    for (int step = 0; step < 2; ++step) {
      forward_backward(*be, *m, x, y);
      ASSERT_TRUE(sync.update(opt, 0.05f, nullptr));
      EXPECT_TRUE(is_bf16_rounding(twin_of(*be, *m), params_of(*be, *m)))
          << dptrain::optimizer_name(kind) << " step " << step;
    }
  }
}

// A twin holding the rounding of 2·W for every parameter: the first dense
// layer's bias-free products (zero biases after init) come out doubled
// exactly, because each layer reads its weight's copy there.
TEST(ParamsBf16, TheLayersReadTheirWeightsThere) {
  auto be = gpu_test::make_gpu(Precision::kBf16);
  auto m = make_model(*be, "dense:8");
  const auto dx = upload(*be, gpu_test::random_vector(std::size_t(kRows) * kIn, 21));
  const std::size_t out = std::size_t(kRows) * kClasses;
  const std::vector<float> plain = download(*be, m->forward(dx.get(), kRows), out);
  const auto doubled = gpu_test::bf16_bits_of(params_of(*be, *m), 2.0f);
  be->copy_to_device(m->params_bf16_for_update(), doubled.data(),
                     doubled.size() * sizeof(std::uint16_t));
  const std::vector<float> twice = download(*be, m->forward(dx.get(), kRows), out);
  ASSERT_EQ(plain.size(), twice.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < plain.size(); ++i)
    if (twice[i] != 2.0f * plain[i]) ++differ;
  EXPECT_EQ(differ, 0u) << "of " << plain.size() << " outputs, not doubled exactly";
}

// Training with the twin (written by the optimizer) ends with the bits of
// training where each forward rounds the weights again (the twin out of
// date at every step: gpu_test::train_step takes params() writable).
TEST(ParamsBf16, StepsThroughTheTwinHaveTheBitsOfStepsThatRoundAgain) {
  auto be = gpu_test::make_gpu(Precision::kBf16);
  dptrain::OptimizerConfig cfg;
  cfg.kind = dptrain::OptimizerKind::kAdamW;
  auto fused = make_model(*be), again = make_model(*be);
  dptrain::Optimizer opt_fused(*be, cfg, fused->num_params());
  dptrain::Optimizer opt_again(*be, cfg, again->num_params());
  OneRank comm;
  dptrain::ReplicatedSync sync(*be, comm, *fused, nullptr);
  for (int step = 0; step < 3; ++step) {
    const auto x = gpu_test::random_vector(std::size_t(kRows) * kIn, 30 + step);
    const auto y = gpu_test::random_labels(kRows, kClasses, 40 + step);
    forward_backward(*be, *fused, x, y);
    ASSERT_TRUE(sync.update(opt_fused, 0.01f, nullptr));
    gpu_test::train_step(*be, *again, opt_again, x, y, 0.01f);
  }
  EXPECT_EQ(params_of(*be, *fused), params_of(*be, *again));
}

}  // namespace
