// Implements: --augment on the CUDA backend against the CPU backend: for
// images and volumes, square and not, crop only, flip only and both, with
// more planes than the grid has blocks, the augmented shard is bitwise the
// CPU's (the same draws from (seed, epoch, global position), the same pixel
// copies and zeros).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dptrain/data/augment.hpp"
#include "dptrain/model/layer.hpp"
#include "gpu_env.hpp"

namespace {

using namespace dptrain;
using gpu_test::download;
using gpu_test::random_vector;
using gpu_test::upload;

struct AugmentCase {
  const char* spec;
  Shape sample;
  int rows;
};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

class CudaAugment : public gpu_test::CpuAndGpu {};

TEST_F(CudaAugment, ShardIsBitwiseTheCpus) {
  const AugmentCase cases[] = {
      {"crop:2,flip", Shape{3, 8, 8}, 17},   {"crop:4,flip", Shape{3, 32, 32}, 500},
      {"crop:3", Shape{1, 28, 28}, 64},      {"flip", Shape{2, 5, 7}, 9},
      {"crop:1,flip", Shape{2, 3, 5, 7}, 40}, {"crop:6", Shape{1, 5, 20}, 33},
  };
  std::uint32_t seed = 3;
  for (const AugmentCase& c : cases) {
    const AugmentSpec spec = parse_augment(c.spec);
    Augmenter on_gpu(spec, c.sample, *gpu_), on_cpu(spec, c.sample, *cpu_);
    StepInfo step;
    step.seed = 11;
    step.epoch = 2;
    step.first_row = 1000;
    const std::vector<float> x = random_vector(c.sample.size() * c.rows, ++seed);
    auto dev = upload(*gpu_, x);
    on_gpu.apply(dev.get(), c.rows, step);
    std::vector<float> want = x;
    on_cpu.apply(want.data(), c.rows, step);
    EXPECT_EQ(bits(download(*gpu_, dev)), bits(want)) << c.spec << " " << c.sample.to_string();
    EXPECT_NE(bits(want), bits(x)) << c.spec << ": nothing changed";
  }
}

// Two shards of one batch (first rows 0 and 25) give what the whole batch
// gives: the draws follow the global position.
TEST_F(CudaAugment, ShardsFollowTheGlobalPosition) {
  const Shape sample{3, 12, 12};
  const int rows = 50;
  Augmenter a(parse_augment("crop:3,flip"), sample, *gpu_);
  const std::vector<float> x = random_vector(sample.size() * rows, 8);
  StepInfo step;
  step.seed = 4;
  auto whole = upload(*gpu_, x);
  a.apply(whole.get(), rows, step);
  auto halves = upload(*gpu_, x);
  a.apply(halves.get(), rows / 2, step);
  step.first_row = rows / 2;
  a.apply(halves.get() + sample.size() * (rows / 2), rows / 2, step);
  EXPECT_EQ(bits(download(*gpu_, halves)), bits(download(*gpu_, whole)));
}

}  // namespace
