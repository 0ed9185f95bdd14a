// Implements: checks of what `mfu` is made of — the model FLOPs per token
// of a GPT (6 N + 12 L T D, counted by hand from the spec here) and the
// table of GPU dense peaks (parts it knows, parts it must refuse to guess).
#include <gtest/gtest.h>

#include <memory>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/model_flops.hpp"
#include "dptrain/telemetry/device_peaks.hpp"

namespace dptrain {
namespace {

TEST(ModelFlops, CountsTheProductsOfAGptByHand) {
  auto be = make_backend("cpu", {});
  const int t = 8, vocab = 50, d = 16, hidden = 32, blocks = 2;
  Model m(*be, parse_model_spec("embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu,dense:16)),ln,dense:50"),
          Shape{t}, 1, vocab);
  // Per block: attention's in and out projections, the MLP, two layer norms.
  const double attention = 3.0 * d * d + 3 * d + d * d + d;
  const double mlp = double(d) * hidden + hidden + double(hidden) * d + d;
  const double norms = 2.0 * 2 * d;
  const double matmul = blocks * (attention + mlp + norms) + 2.0 * d + (double(d) * vocab + vocab);
  const double tables = double(vocab) * d + double(t) * d;  // embed and pos: looked up, not multiplied
  const ModelFlops f = model_flops(m, t);
  EXPECT_EQ(f.params, static_cast<std::size_t>(matmul + tables));
  EXPECT_EQ(f.matmul_params, static_cast<std::size_t>(matmul));
  EXPECT_EQ(f.attention_layers, blocks);
  EXPECT_DOUBLE_EQ(f.attention, 12.0 * blocks * t * d);
  EXPECT_DOUBLE_EQ(f.per_token(), 6.0 * matmul + 12.0 * blocks * t * d);
}

TEST(ModelFlops, AModelWithoutAttentionCountsItsProductsOnly) {
  auto be = make_backend("cpu", {});
  Model m(*be, parse_model_spec("dense:6,relu,dense:3"), Shape{4}, 2);
  const ModelFlops f = model_flops(m, 1);
  EXPECT_EQ(f.matmul_params, std::size_t(4 * 6 + 6 + 6 * 3 + 3));
  EXPECT_EQ(f.attention_layers, 0);
  EXPECT_DOUBLE_EQ(f.per_token(), 6.0 * (4 * 6 + 6 + 6 * 3 + 3));
}

TEST(DevicePeaks, KnowsTheSxmPartsPerPrecision) {
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA H200", Precision::kBf16), 989.4);
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA H200", Precision::kTf32), 494.7);
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA H200", Precision::kFp32), 66.9);
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA H100 80GB HBM3", Precision::kBf16), 989.4);
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::kBf16), 312.0);
  EXPECT_DOUBLE_EQ(dense_peak_tflops("NVIDIA A100-PCIE-40GB", Precision::kTf32), 156.0);
}

TEST(DevicePeaks, RefusesPartsWhoseClocksDifferAndUnknownDevices) {
  EXPECT_EQ(dense_peak_tflops("NVIDIA H100 PCIe", Precision::kBf16), 0.0);
  EXPECT_EQ(dense_peak_tflops("NVIDIA H100 NVL", Precision::kBf16), 0.0);
  EXPECT_EQ(dense_peak_tflops("NVIDIA H200 NVL", Precision::kBf16), 0.0);
  EXPECT_EQ(dense_peak_tflops("NVIDIA GeForce RTX 4090", Precision::kBf16), 0.0);
  EXPECT_EQ(dense_peak_tflops("", Precision::kBf16), 0.0);
}

TEST(DevicePeaks, DescribesWhereThePeakCameFrom) {
  EXPECT_EQ(describe_peak("NVIDIA H200", Precision::kBf16, 0.0),
            "989.4 TFLOPS a device (NVIDIA H200, bf16 dense)");
  EXPECT_EQ(describe_peak("NVIDIA H200", Precision::kBf16, 500.0),
            "500 TFLOPS a device (--peak-tflops)");
  EXPECT_EQ(describe_peak("", Precision::kFp32, 0.0),
            "no dense peak known for this device (--peak-tflops names one)");
}

}  // namespace
}  // namespace dptrain
