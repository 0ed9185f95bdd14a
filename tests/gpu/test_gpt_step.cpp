// Implements: the steady state of a GPT training step on the CUDA backend
// (the job of gpt_step_rig.hpp: bf16 logits under bf16, as the trainer).
// Once every batch size has been seen (the first epoch), a step — the input
// pipeline's scatter into pinned memory and upload on the copy stream,
// forward through embed, pos, ln, causal attention (strided-batched GEMMs),
// gelu:tanh and dense per position, xent over positions, backward with a
// bucketed NCCL all-reduce per layer, clipping and AdamW — allocates no
// device memory and makes the host wait for the device only where the step
// reads a result back. In fp32 and in bf16 (whose GEMM operands go through
// scratch that grows on the first step only).
//
// What is counted where. Everywhere: the device's free memory
// (cudaMemGetInfo) and the backend's DeviceBuffer bytes do not move over
// the counted steps (on a real GPU only when no other rank shares it). On
// the host emulation (tests/emulated/), the runtime's own counters
// (dptrain_emu::calls, device_emulator.hpp) besides: no cudaMalloc,
// cudaHostAlloc or free, no device-wide synchronization and no copy into
// pageable memory; per step exactly one stream synchronization (the
// non-finite count of the gradients and, with clipping, their squared
// norm, read back together: numbers the host needs before it goes on,
// Backend::check_gradients) and one event
// synchronization per batch started (InputPipeline's sync_upload: before
// MPI rewrites the staging memory of the next batch, the host waits for the
// upload that last read it, queued a step earlier and long done on a GPU;
// the last step starts no batch). A kernel table whose scratch grew every
// step, a layer that read a value back, or a stray cudaDeviceSynchronize
// would each break a count (counted from step 0 instead, the bf16 run shows
// the first step's 6 cudaMalloc, 4 frees and 6 extra stream syncs).
//
// Beside it: Backend::gemm_batched (attention's products) honours the
// precision: bf16 and, on the emulation, TF32 results differ from fp32's
// (on a GPU, CUBLAS_COMPUTE_32F_FAST_TF32 allows TF32 tensor cores but
// does not require them, so there TF32 is only held to its bound).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "gpt_step_rig.hpp"
#include "gpu_env.hpp"

namespace dptrain {
namespace {

using gpu_test::env;

const char* name(Precision p) {
  return p == Precision::kFp32 ? "fp32" : p == Precision::kTf32 ? "tf32" : "bf16";
}

#if defined(DPTRAIN_EMULATED_DEVICE)
// The emulated runtime's counters, one entry per dptrain_emu::RuntimeCall.
std::vector<std::size_t> runtime_calls() {
  std::vector<std::size_t> c;
  for (int i = 0; i < static_cast<int>(dptrain_emu::RuntimeCall::kCount); ++i)
    c.push_back(dptrain_emu::calls(static_cast<dptrain_emu::RuntimeCall>(i)));
  return c;
}
#endif

std::size_t free_device_bytes() {
  std::size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return free_b;
}

void warmed_up_steps_allocate_nothing(Precision precision) {
  if (!env().distinct) GTEST_SKIP() << "ranks share a GPU; NCCL needs one GPU per rank";
  const std::uint64_t steps = 10;
  gpu_test::GptStepRig rig(precision,
                           "embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,dense:16)),"
                           "ln,dense:11",
                           steps);
  Backend* be = &rig.backend();
  const std::uint64_t warm = rig.warm_steps();
  ASSERT_LT(warm, steps);
  std::size_t free_before = 0, buffers_before = 0;
#if defined(DPTRAIN_EMULATED_DEVICE)
  std::vector<std::size_t> calls_before;
#endif
  for (std::uint64_t s = 0; s < steps; ++s) {
    if (s == warm) {
      be->synchronize();
      free_before = free_device_bytes();
      buffers_before = be->buffer_bytes();
#if defined(DPTRAIN_EMULATED_DEVICE)
      calls_before = runtime_calls();
#endif
    }
    ASSERT_TRUE(rig.step(s)) << "non-finite gradients at step " << s;
  }
#if defined(DPTRAIN_EMULATED_DEVICE)
  const std::vector<std::size_t> calls_after = runtime_calls();
#endif
  be->synchronize();
  const std::size_t counted = steps - warm;
  EXPECT_EQ(be->buffer_bytes(), buffers_before) << "DeviceBuffers made in a warmed-up step";
  // Another process on the same GPU (ranks sharing it are skipped above)
  // would move the free memory; on the emulation nothing else shares it.
  EXPECT_EQ(free_device_bytes(), free_before) << "device memory allocated in a warmed-up step";
#if defined(DPTRAIN_EMULATED_DEVICE)
  using dptrain_emu::RuntimeCall;
  auto added = [&](RuntimeCall c) {
    const auto i = static_cast<std::size_t>(c);
    return calls_after[i] - calls_before[i];
  };
  std::printf("rank %d, %s: per warmed-up step %.1f stream and %.1f event synchronizations\n",
              env().rank, name(precision),
              double(added(RuntimeCall::kStreamSync)) / double(counted),
              double(added(RuntimeCall::kEventSync)) / double(counted - 1));
  EXPECT_EQ(added(RuntimeCall::kMalloc), 0u) << "cudaMalloc in " << counted << " warmed-up steps";
  EXPECT_EQ(added(RuntimeCall::kHostAlloc), 0u) << "cudaHostAlloc in warmed-up steps";
  EXPECT_EQ(added(RuntimeCall::kFree), 0u) << "cudaFree or cudaFreeHost in warmed-up steps";
  EXPECT_EQ(added(RuntimeCall::kDeviceSync), 0u) << "cudaDeviceSynchronize in warmed-up steps";
  EXPECT_EQ(added(RuntimeCall::kBlockingCopy), 0u) << "a copy into pageable memory in warmed-up steps";
  EXPECT_EQ(added(RuntimeCall::kStreamSync), counted)
      << "stream synchronizations: one a step expected (non-finite count and clipping norm "
         "read back together)";
  EXPECT_EQ(added(RuntimeCall::kEventSync), counted - 1)
      << "event synchronizations: one per batch started expected (sync_upload; the last step "
         "starts none)";
#else
  (void)counted;
#endif
}

TEST(CudaGptStep, WarmedUpFp32StepAllocatesNothingAndSyncsOnlyForResults) {
  warmed_up_steps_allocate_nothing(Precision::kFp32);
}

TEST(CudaGptStep, WarmedUpBf16StepAllocatesNothingAndSyncsOnlyForResults) {
  warmed_up_steps_allocate_nothing(Precision::kBf16);
}

// Attention's score product q k^T over 6 heads of [8, 16] in each precision:
// bf16 (and TF32 on the emulation) must come out other than fp32, and
// within that precision's error of it (4e-3, 1.6e-2 of sum |q||k|, as
// test_cuda_sequence.cpp bounds them against the CPU).
TEST(CudaGptStep, BatchedGemmHonoursThePrecision) {
  const int t = 8, hd = 16, heads = 6;
  const std::size_t th = static_cast<std::size_t>(t) * hd, tt = static_cast<std::size_t>(t) * t;
  const auto q = gpu_test::random_vector(th * heads, 31), k = gpu_test::random_vector(th * heads, 32);
  auto scores = [&](Precision p) {
    auto be = gpu_test::make_gpu(p);
    auto dq = gpu_test::upload(*be, q), dk = gpu_test::upload(*be, k);
    DeviceBuffer<float> s(*be, tt * heads);
    be->gemm_batched(false, true, t, t, hd, 1.0f, dq.get(), hd, th, dk.get(), hd, th, 0.0f,
                     s.get(), t, tt, heads);
    return gpu_test::download(*be, s);
  };
  const auto fp32 = scores(Precision::kFp32);
  struct Case { Precision p; double tol; bool must_differ; };
#if defined(DPTRAIN_EMULATED_DEVICE)
  const bool tf32_differs = true;
#else
  const bool tf32_differs = false;
#endif
  for (const Case c : {Case{Precision::kTf32, 4e-3, tf32_differs}, Case{Precision::kBf16, 1.6e-2, true}}) {
    const auto got = scores(c.p);
    double worst = 0.0;  // relative to sum |q||k| of the entry
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < t; ++i)
        for (int j = 0; j < t; ++j) {
          double scale = 0.0;
          for (int l = 0; l < hd; ++l)
            scale += std::fabs(q[h * th + i * hd + l] * k[h * th + j * hd + l]);
          const std::size_t at = h * tt + i * t + j;
          worst = std::max(worst, std::fabs(double(got[at]) - fp32[at]) / scale);
        }
    EXPECT_LE(worst, c.tol) << name(c.p);
    if (c.must_differ) EXPECT_GT(worst, 1e-6) << name(c.p) << " gave fp32's products";
  }
}

}  // namespace
}  // namespace dptrain
