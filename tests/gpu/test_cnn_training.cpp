// Implements: the CNN training test of the CPU reference on one GPU — the
// same small networks (2-D: conv, bn, relu, maxpool, a residual block with
// the projection shortcut, dropout, gap, dense; 3-D: conv, bn:local,
// avgpool, flatten, dense) trained for some steps from the same initial
// weights and data, in fp32, agree with the CPU run in every loss, weight
// and running statistic. Dropout masks are the same draws on both, so a
// mask that differed would move the weights by far more than the tolerance.
// And, on the host emulation, the demo CNN's warmed-up forward, loss and
// backward queue their work without making the host wait or allocate.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "gpu_env.hpp"
#include "training_support.hpp"

namespace {

using namespace dptrain;
using gpu_test::all_close;
using gpu_test::download;
using gpu_test::random_labels;
using gpu_test::random_vector;

constexpr int kRows = 30, kClasses = 10, kSteps = 8;

struct Network {
  std::string spec;
  Shape input;
};

struct Trained {
  std::vector<float> losses, params, buffers;
};

// kSteps steps on `be` from seed 1234 and the same random batches.
Trained train(Backend& be, const Network& net, const OptimizerConfig& cfg, float lr) {
  Model model(be, parse_model_spec(net.spec), net.input, kRows);
  model.init(1234);
  Optimizer opt(be, cfg, model.num_params());
  Trained out;
  const std::size_t sample = net.input.size();
  for (int step = 0; step < kSteps; ++step) {
    StepInfo info;
    info.seed = 77;
    info.epoch = static_cast<std::uint64_t>(step);
    model.set_step(info);
    const auto x = random_vector(kRows * sample, 900 + step);
    out.losses.push_back(
        gpu_test::train_step(be, model, opt, x, random_labels(kRows, kClasses, 950 + step), lr));
  }
  out.params = download(be, model.params(), model.num_params());
  out.buffers = download(be, model.buffers(), model.num_buffers());
  return out;
}

// Tolerances as for the MLP test (test_training.cpp): cuDNN and oneDNN sum
// each convolution in their own order (about 1e-6 relative a value), which
// a few steps of training carry to about 1e-5; a wrong kernel, mask or
// statistic moves the weights by a fraction of lr, far above 1e-4.
// Every convolution of these networks feeds a bn, which removes its bias
// again: that bias has an exactly zero gradient, so what training does to
// it is the rounding noise of that zero, different in any two
// implementations, and Adam turns noise into steps of up to lr (eps 1e-8;
// eps 1e-4 keeps them below lr / 100, small enough for the running means
// the biases shift). Those tensors are left out of the comparison.
std::vector<float> without_conv_biases(const std::vector<float>& params, const Network& net) {
  auto cpu = gpu_test::make_cpu();
  const Model model(*cpu, parse_model_spec(net.spec), net.input, kRows);
  std::vector<float> kept;
  for (const ParamInfo& p : model.param_layout()) {
    const std::string owner = p.layer.substr(p.layer.rfind('/') + 1);
    if (p.name == "bias" && (owner.rfind("conv", 0) == 0 || owner == "proj")) continue;
    kept.insert(kept.end(), params.begin() + static_cast<std::ptrdiff_t>(p.offset),
                params.begin() + static_cast<std::ptrdiff_t>(p.offset + p.count));
  }
  return kept;
}

// The running means, and every other buffer, of a trained model's buffers.
struct Buffers {
  std::vector<float> means, others;
};
Buffers split_buffers(const std::vector<float>& buffers, const Network& net) {
  auto cpu = gpu_test::make_cpu();
  const Model model(*cpu, parse_model_spec(net.spec), net.input, kRows);
  Buffers out;
  for (const ParamInfo& p : model.buffer_layout()) {
    std::vector<float>& to = p.name == "running_mean" ? out.means : out.others;
    to.insert(to.end(), buffers.begin() + static_cast<std::ptrdiff_t>(p.offset),
              buffers.begin() + static_cast<std::ptrdiff_t>(p.offset + p.count));
  }
  return out;
}

// mean_drift: how far the running means may differ because the conv biases
// under them drifted apart (see without_conv_biases): a bn's running mean
// carries its input's bias, and the momentum average of the biases' drift
// is at most the drift itself.
void expect_same_training(const Network& net, const OptimizerConfig& cfg, float lr,
                          double mean_drift) {
  auto gpu = gpu_test::make_gpu();
  auto cpu = gpu_test::make_cpu();
  const Trained on_gpu = train(*gpu, net, cfg, lr);
  const Trained on_cpu = train(*cpu, net, cfg, lr);
  EXPECT_TRUE(all_close(on_gpu.losses, on_cpu.losses, 1e-4, 0.0)) << net.spec;
  const std::vector<float> gpu_params = without_conv_biases(on_gpu.params, net);
  EXPECT_LT(gpu_params.size(), on_gpu.params.size()) << "no conv bias found in " << net.spec;
  EXPECT_TRUE(all_close(gpu_params, without_conv_biases(on_cpu.params, net), 1e-4, 1e-6))
      << net.spec;
  const Buffers got = split_buffers(on_gpu.buffers, net), want = split_buffers(on_cpu.buffers, net);
  EXPECT_TRUE(all_close(got.others, want.others, 1e-4, 1e-6)) << net.spec;
  EXPECT_TRUE(all_close(got.means, want.means, 1e-4, 1e-6 + mean_drift)) << net.spec;
}

const Network kImages{
    "conv:8:3,bn,relu,maxpool:2,res(conv:16:3:2,bn,relu,conv:16:3,bn),relu,dropout:0.25,gap,"
    "dense:10",
    Shape{3, 12, 12}};
const Network kVolumes{"conv:4:3,bn:local,relu,avgpool:2,flatten,dense:10", Shape{2, 6, 6, 6}};

OptimizerConfig sgd_momentum() {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kSgd;
  cfg.momentum = 0.9f;
  return cfg;
}

// eps 1e-4, as in the PyTorch CNN test: see without_conv_biases. Adam's
// steps on a bias gradient of rounding noise (|g| <= 1e-6 here) are at most
// lr |g| / eps <= lr / 100, so after kSteps the biases, and the running
// means they shift, may have drifted kSteps lr / 100 apart. SGD's steps on
// that noise are lr |g|, below the 1e-6 the comparison allows anyway.
constexpr float kAdamLr = 1e-3f;
constexpr double kAdamMeanDrift = kSteps * double(kAdamLr) / 100;
OptimizerConfig adam() {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdam;
  cfg.eps = 1e-4f;
  return cfg;
}

TEST(CudaCnnTraining, ImagesSgdMomentumMatchesCpu) {
  expect_same_training(kImages, sgd_momentum(), 0.05f, 0.0);
}
TEST(CudaCnnTraining, ImagesAdamMatchesCpu) {
  expect_same_training(kImages, adam(), kAdamLr, kAdamMeanDrift);
}
TEST(CudaCnnTraining, VolumesSgdMomentumMatchesCpu) {
  expect_same_training(kVolumes, sgd_momentum(), 0.05f, 0.0);
}

#if defined(DPTRAIN_EMULATED_DEVICE)
// The demo CNN's layers (jobs/fashion_mnist_cnn.ini, on 12 x 12 images),
// warmed up, in each precision: forward, the loss and backward only queue
// work. No call of the emulated runtime that waits for the device or
// allocates (dptrain_emu::RuntimeCall), so the host's time to queue them
// is what dptrain_bench's row "host queue time vs device time" takes it
// for, with no wait of its own in it.
TEST(CudaCnnTraining, AWarmedUpForwardAndBackwardQueueWithoutWaiting) {
  const Network demo{
      "conv:32:3,bn,relu,maxpool:2,conv:64:3,bn,relu,maxpool:2,dense:128,relu,dropout:0.3,"
      "dense:10",
      Shape{1, 12, 12}};
  constexpr int rows = 4;
  const auto counts = [] {
    std::vector<std::size_t> c;
    for (int i = 0; i < static_cast<int>(dptrain_emu::RuntimeCall::kCount); ++i)
      c.push_back(dptrain_emu::calls(static_cast<dptrain_emu::RuntimeCall>(i)));
    return c;
  };
  for (const Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    auto be = gpu_test::make_gpu(p);
    Model model(*be, parse_model_spec(demo.spec), demo.input, rows);
    model.init(1);
    StepInfo info;
    info.seed = 3;
    model.set_step(info);
    auto x = gpu_test::upload(*be, random_vector(rows * demo.input.size(), 5));
    auto y = gpu_test::upload(*be, random_labels(rows, kClasses, 6));
    DeviceBuffer<float> stats(*be, 2);
    const auto pass = [&] {
      const float* logits = model.forward(x.get(), rows);
      be->kernels<LossKernels>().softmax_xent(logits, y.get(), rows, model.output_dim(),
                                               1.0f / rows, model.output_grad(), stats.get());
      model.backward(x.get(), model.output_grad(), rows);
    };
    pass();
    pass();
    be->synchronize();
    const std::vector<std::size_t> before = counts();
    pass();
    const std::vector<std::size_t> after = counts();
    be->synchronize();
    for (std::size_t i = 0; i < before.size(); ++i)
      EXPECT_EQ(after[i], before[i]) << "runtime call " << i << " (dptrain_emu::RuntimeCall) in "
                                     << "precision " << static_cast<int>(p);
  }
}
#endif

}  // namespace
