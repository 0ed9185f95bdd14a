// Implements: which of dptrain's own kernels a warmed-up GPT training step
// launches on the CUDA backend, under --precision bf16 with the fused
// attention: the census of issue 36's targets that needs no GPU to read.
// On the host emulation (tests/emulated/), which counts launches by
// kernel, for the job of gpt_step_rig.hpp with 2 and with 4 blocks:
//  - no pass that the GEMM epilogues and the fused kernels take in: a
//    dense layer's bias (add_bias_kernel), bias gradient (bias_grad_kernel)
//    or GELU forward and backward (activation_*_kernel), the materialized
//    attention's softmax and its gradient, and its head shuffles
//    (qkv_kernel, heads_kernel), and the loss's sum over its blocks
//    (add_partials_kernel: the fused classifier's last block makes it);
//  - conversions to bf16 that do not grow with the depth: the optimizer's
//    pass rounds the weights, and the blocks' activations and gradients
//    get their bf16 copies from the kernels that make them, so no layer of
//    a block converts its operands (2 a step remain: the last layer
//    norm's output for the head, and the gradient the last block gets
//    from that norm);
//  - at most kMostPerBlock of our kernels for a block's forward and
//    backward (the difference between the two depths, halved), a ratchet:
//    a change that adds a pass to every block must say so here.
// The census is printed. And the demo CNN's step runs no relu kernel for a
// relu that follows a bn (Layer::absorbs_next), and two launches a bn each
// way: its sums (with the statistics, forward) and normalize or the input
// gradient. On a GPU, which counts no
// launches by name, the tests skip: there the check's step by kernel
// (ncu) is the census.
#include <cuda_runtime_api.h>  // on the emulation, dptrain_emu::launches_by_kernel
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/model/shard.hpp"
#include "gpt_step_rig.hpp"
#include "gpu_env.hpp"
#include "train/train_step.hpp"
#include "training_support.hpp"

namespace {

using Census = std::map<std::string, long>;

#if defined(DPTRAIN_EMULATED_DEVICE)
Census launches_so_far() {
  Census c;
  for (const auto& [kernel, n] : dptrain_emu::launches_by_kernel()) c[kernel] = static_cast<long>(n);
  return c;
}
#endif

// Our kernels launched by the warmed-up steps of the rig's job with
// `blocks` blocks, per step.
Census census_of_a_step(int blocks) {
  Census per_step;
#if defined(DPTRAIN_EMULATED_DEVICE)
  const std::uint64_t steps = 6;
  gpu_test::GptStepRig rig(dptrain::Precision::kBf16,
                           "embed:16,pos," + std::to_string(blocks) +
                               "*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dense:16)),ln,dense:11",
                           steps);
  const std::uint64_t warm = rig.warm_steps();
  Census before;
  for (std::uint64_t s = 0; s < steps; ++s) {
    if (s == warm) {
      rig.backend().synchronize();
      before = launches_so_far();
    }
    EXPECT_TRUE(rig.step(s)) << "non-finite gradients at step " << s;
  }
  rig.backend().synchronize();
  for (const auto& [kernel, n] : launches_so_far()) {
    const long added = n - before[kernel];
    if (added % long(steps - warm) != 0)
      ADD_FAILURE() << kernel << ": " << added << " launches over " << steps - warm << " like steps";
    if (added > 0) per_step[kernel] = added / long(steps - warm);
  }
#else
  (void)blocks;
#endif
  return per_step;
}

long total(const Census& c) {
  long n = 0;
  for (const auto& [kernel, count] : c) n += count;
  return n;
}

// A block's forward and backward, beside its GEMMs (cuBLAS and cuBLASLt,
// not counted): its two layer norms (forward, input gradient with the
// block's gradient sum, the scale and shift gradients with their chunk
// sums in one launch) and the fused attention (forward; the row dots, dK
// and dV, dQ of the backward): 10 launches.
constexpr long kMostPerBlock = 10;

TEST(CudaStepKernels, Bf16GptStepRunsNoPassTheEpiloguesAndFusedKernelsTakeIn) {
#if !defined(DPTRAIN_EMULATED_DEVICE)
  GTEST_SKIP() << "launches are counted by kernel on the host emulation only";
#endif
  if (!gpu_test::env().distinct) GTEST_SKIP() << "ranks share a GPU; NCCL needs one GPU per rank";
  const Census two = census_of_a_step(2), four = census_of_a_step(4);
  if (gpu_test::env().rank == 0) {
    std::printf("our kernels a warmed-up bf16 step, 2 blocks / 4 blocks:\n");
    Census names = two;
    names.insert(four.begin(), four.end());
    for (const auto& [kernel, n] : names)
      std::printf("  %-36s %3ld %3ld\n", kernel.c_str(), two.count(kernel) ? two.at(kernel) : 0L,
                  four.count(kernel) ? four.at(kernel) : 0L);
    std::printf("  %-36s %3ld %3ld (%ld a block)\n", "all", total(two), total(four),
                (total(four) - total(two)) / 2);
  }
  // (add_partials_kernel: the loss's sum over its blocks, now made by the
  // classifier's last block.)
  for (const char* absorbed : {"add_bias_kernel", "bias_grad_kernel", "activation_forward_kernel",
                               "activation_backward_kernel", "attention_softmax_kernel",
                               "attention_softmax_grad_kernel", "qkv_kernel", "heads_kernel",
                               "add_partials_kernel"})
    EXPECT_EQ(four.count(absorbed), 0u) << absorbed << " runs in the step: " << four.at(absorbed)
                                        << " launches";
  const long to2 = two.count("to_bf16_kernel") ? two.at("to_bf16_kernel") : 0;
  const long to4 = four.count("to_bf16_kernel") ? four.at("to_bf16_kernel") : 0;
  EXPECT_EQ(to4, to2) << "bf16 conversions grow with the depth: layers convert their operands";
  EXPECT_EQ(four.count("from_bf16_kernel"), 0u) << "bf16 values widened to fp32 in the step";
  const long per_block = (total(four) - total(two)) / 2;
  EXPECT_LE(per_block, kMostPerBlock) << "our kernels per block, forward and backward";
}

// Our kernels launched per step by a CNN of the demo's kind (two conv, bn,
// relu, pool stages, then dense, relu, dense) after a warm-up step.
Census census_of_a_cnn_step() {
  Census per_step;
#if defined(DPTRAIN_EMULATED_DEVICE)
  using namespace dptrain;
  constexpr int kRows = 6, kSteps = 3;
  auto be = gpu_test::make_gpu(Precision::kFp32);
  auto comm = be->make_communicator(MpiCommHandle{MPI_COMM_SELF});
  const Shape input{1, 12, 12};
  Model model(*be,
              parse_model_spec("conv:4:3,bn,relu,maxpool:2,conv:8:3,bn,relu,maxpool:2,dense:16,"
                               "relu,dense:10"),
              input, kRows);
  model.init(3);
  Optimizer opt(*be, OptimizerConfig{}, model.num_params());
  DeviceBuffer<float> stats(*be, 2);
  auto x = gpu_test::upload(*be, gpu_test::random_vector(std::size_t(kRows) * input.size(), 5));
  const std::vector<std::int32_t> labels = gpu_test::random_labels(kRows, 10, 6);
  DeviceBuffer<std::int32_t> y(*be, labels.size());
  be->copy_to_device(y.get(), labels.data(), labels.size() * sizeof(std::int32_t));
  Shard shard;
  shard.rows = kRows;
  shard.features = x.get();
  shard.labels = y.get();
  Census before;
  for (int step = 0; step < kSteps; ++step) {
    if (step == 1) {
      be->synchronize();
      before = launches_so_far();
    }
    EXPECT_TRUE(train_step(*be, *comm, model, opt, LossKind::kXent, shard, kRows, 1e-2f,
                           stats.get(), nullptr));
  }
  be->synchronize();
  for (const auto& [kernel, n] : launches_so_far())
    if (n > before[kernel]) per_step[kernel] = (n - before[kernel]) / (kSteps - 1);
#endif
  return per_step;
}

TEST(CudaStepKernels, CnnStepRunsEachReluAfterABnInTheBnsPasses) {
#if !defined(DPTRAIN_EMULATED_DEVICE)
  GTEST_SKIP() << "launches are counted by kernel on the host emulation only";
#endif
  const Census c = census_of_a_cnn_step();
  if (gpu_test::env().rank == 0) {
    std::printf("our kernels a warmed-up fp32 step of the CNN:\n");
    for (const auto& [kernel, n] : c) std::printf("  %-36s %3ld\n", kernel.c_str(), n);
    std::printf("  %-36s %3ld\n", "all", total(c));
  }
  const auto count = [&](const char* kernel) { return c.count(kernel) ? c.at(kernel) : 0L; };
  EXPECT_EQ(count("normalize_kernel"), 2) << "the two bn layers' forward";
  EXPECT_EQ(count("input_grad_kernel"), 2) << "the two bn layers' input gradient";
  EXPECT_EQ(count("activation_forward_kernel"), 1) << "only the relu after the dense layer";
  EXPECT_EQ(count("activation_backward_kernel"), 1) << "only the relu after the dense layer";
  // bn's sums and its statistics (one rank: no sum over replicas between
  // them) in one launch forward, its gradient sums in one backward.
  EXPECT_EQ(count("channel_sums_kernel"), 4) << "each bn's sums, forward and backward";
  EXPECT_EQ(count("batch_stats_kernel"), 0) << "the statistics in the sums' launch";
}

}  // namespace
