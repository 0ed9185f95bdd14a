// Implements: dptrain_conv_layout (cuDNN builds only), the channels-last
// rows of tools/gpu-check.sh: whether NHWC tensors would make the demo
// CNN's convolutions faster on the tensor cores. Each conv layer of
// jobs/fashion_mnist_cnn.ini (128 rows; 1 -> 32 channels on 28x28 and
// 32 -> 64 on 14x14, 3x3, padding 1) and each pass, on cuDNN with NCHW
// tensors (what the layers exchange, and what the plans use) against NHWC,
// in TF32 and bf16, with the algorithm the plans would pick for each layout
// (conv_algorithms.hpp: heuristics, deterministic only). Device-timed with
// events, median of 5 rounds of 20 passes. One JSON line per row, as
// dptrain_bench prints them: ours = NCHW, baseline = NHWC, ratio = NCHW /
// NHWC (above 1: channels-last is faster). No target: the rows decide
// whether converting at the layers' edges would pay (docs/gpu.md).
// Usage: dptrain_conv_layout [--device N]
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_handles.hpp"
#include "cuda/cudnn/conv_algorithms.hpp"
#include "cuda/cudnn/cudnn_handles.hpp"
#include "cuda/error_cuda.hpp"
#include "dptrain/error.hpp"

namespace {

using namespace dptrain;
using namespace dptrain::cuda;

constexpr int kRows = 128, kKernel = 3, kRounds = 5, kPasses = 20;

struct Layer {
  int in, out, size;  // channels in and out, square extent
};
constexpr std::array<Layer, 2> kLayers{{{1, 32, 28}, {32, 64, 14}}};
constexpr std::array<ConvPass, 3> kPassKinds{ConvPass::kForward, ConvPass::kBackwardData,
                                            ConvPass::kBackwardFilter};

// One layer's descriptors, buffers and per-pass algorithms in one layout.
struct Setup {
  TensorDescriptor x, y;
  FilterDescriptor w;
  std::array<ConvolutionDescriptor, 3> conv;
  std::array<std::optional<AlgorithmChoice>, 3> algo;
  DeviceMemory xs, ys, ws, workspace;
};

Setup make_setup(cudnnHandle_t h, const Layer& l, cudnnTensorFormat_t format, ConvArithmetic a) {
  const bool bf16 = a == ConvArithmetic::kBf16;
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const std::size_t bytes = bf16 ? 2 : 4;
  Setup s;
  s.x = TensorDescriptor::create();
  s.y = TensorDescriptor::create();
  s.w = FilterDescriptor::create();
  DPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x.get(), format, type, kRows, l.in, l.size, l.size));
  DPT_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(s.y.get(), format, type, kRows, l.out, l.size, l.size));
  DPT_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(s.w.get(), type, format, l.out, l.in, kKernel, kKernel));
  std::size_t workspace = 0;
  for (std::size_t p = 0; p < kPassKinds.size(); ++p) {
    s.conv[p] = ConvolutionDescriptor::create();
    DPT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(s.conv[p].get(), 1, 1, 1, 1, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    s.algo[p] = choose_algorithm(h, kPassKinds[p], {s.x.get(), s.y.get(), s.w.get()},
                                 s.conv[p].get(), a, kMaxConvWorkspace);
    if (s.algo[p]) workspace = std::max(workspace, s.algo[p]->workspace);
  }
  const std::size_t x_n = std::size_t(kRows) * l.in * l.size * l.size;
  const std::size_t y_n = std::size_t(kRows) * l.out * l.size * l.size;
  s.xs = DeviceMemory(x_n * bytes);
  s.ys = DeviceMemory(y_n * bytes);
  s.ws = DeviceMemory(std::size_t(l.out) * l.in * kKernel * kKernel * bytes);
  s.workspace = DeviceMemory(std::max<std::size_t>(workspace, 1));
  // Small finite values in either type (bytes 0x3c: about 0.0115).
  for (const DeviceMemory* m : {&s.xs, &s.ys, &s.ws})
    DPT_CUDA_CHECK(cudaMemset(m->get(), 0x3c, m->bytes()));
  return s;
}

void run_pass(cudnnHandle_t h, const Setup& s, std::size_t p) {
  const float one = 1.0f, zero = 0.0f;
  const AlgorithmChoice& c = *s.algo[p];
  void* ws = s.workspace.get();
  switch (kPassKinds[p]) {
    case ConvPass::kForward:
      DPT_CUDNN_CHECK(cudnnConvolutionForward(
          h, &one, s.x.get(), s.xs.get(), s.w.get(), s.ws.get(), s.conv[p].get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws, c.workspace, &zero, s.y.get(),
          s.ys.get()));
      break;
    case ConvPass::kBackwardData:
      DPT_CUDNN_CHECK(cudnnConvolutionBackwardData(
          h, &one, s.w.get(), s.ws.get(), s.y.get(), s.ys.get(), s.conv[p].get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws, c.workspace, &zero, s.x.get(),
          s.xs.get()));
      break;
    case ConvPass::kBackwardFilter:
      DPT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
          h, &one, s.x.get(), s.xs.get(), s.y.get(), s.ys.get(), s.conv[p].get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws, c.workspace, &zero,
          s.w.get(), s.ws.get()));
      break;
  }
}

// Median over rounds of the mean pass time, in ms.
double time_pass(cudnnHandle_t h, cudaStream_t stream, const Setup& s, std::size_t p) {
  const Event start = Event::create_timed(), stop = Event::create_timed();
  for (int i = 0; i < 3; ++i) run_pass(h, s, p);  // warm-up
  std::vector<double> rounds;
  for (int r = 0; r < kRounds; ++r) {
    DPT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    for (int i = 0; i < kPasses; ++i) run_pass(h, s, p);
    DPT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    DPT_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    DPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    rounds.push_back(ms / kPasses);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

void print_rows(cudnnHandle_t h, cudaStream_t stream, const Layer& l, ConvArithmetic a) {
  const char* precision = a == ConvArithmetic::kBf16 ? "bf16" : "tf32";
  const Setup nchw = make_setup(h, l, CUDNN_TENSOR_NCHW, a);
  const Setup nhwc = make_setup(h, l, CUDNN_TENSOR_NHWC, a);
  for (std::size_t p = 0; p < kPassKinds.size(); ++p) {
    char name[160];
    std::snprintf(name, sizeof name, "conv %d->%d on %dx%d %s, NCHW vs NHWC (%s)", l.in, l.out,
                  l.size, l.size, pass_name(kPassKinds[p]), precision);
    if (!nchw.algo[p] || !nhwc.algo[p]) {
      std::printf("{\"row\":\"%s\",\"status\":\"no deterministic algorithm\",\"note\":\"%s\"}\n",
                  name, !nchw.algo[p] ? "NCHW" : "NHWC");
      continue;
    }
    const double ours = time_pass(h, stream, nchw, p), base = time_pass(h, stream, nhwc, p);
    std::printf("{\"row\":\"%s\",\"ours\":%.4f,\"baseline\":%.4f,\"unit\":\"ms\",\"ratio\":%.4f,"
                "\"target\":\"none: above 1, channels-last is faster\",\"note\":\"128 rows, 3x3, "
                "padding 1; algorithms %d and %d\"}\n",
                name, ours, base, ours / base, nchw.algo[p]->algo, nhwc.algo[p]->algo);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int device = 0;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--device" && i + 1 < argc) device = std::stoi(argv[++i]);
      else throw Error(ExitCode::kUsage, "usage: dptrain_conv_layout [--device N]");
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "dptrain_conv_layout: no GPU visible\n");
      return 77;
    }
    DPT_CUDA_CHECK(cudaSetDevice(device));
    const Stream stream = Stream::create();
    const CudnnHandle handle = CudnnHandle::create();
    DPT_CUDNN_CHECK(cudnnSetStream(handle.get(), stream.get()));
    for (const ConvArithmetic a : {ConvArithmetic::kTf32, ConvArithmetic::kBf16})
      for (const Layer& l : kLayers) print_rows(handle.get(), stream.get(), l, a);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "dptrain_conv_layout: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {  // --device not a number, out of memory
    std::fprintf(stderr, "dptrain_conv_layout: %s\n", e.what());
    return 1;
  }
}
