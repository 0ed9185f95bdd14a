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
// NHWC (above 1: channels-last is faster). Then one row per layer that
// decides the question: the layer's passes of a training step (the first
// layer has no backward data pass) in NCHW against the same passes in NHWC
// plus the conversions that NHWC convolutions between NCHW layers take at
// their edges (cudnnTransformTensor: x, dy, w in; y, dx, dw out). Last, per
// precision, one row for the conv stack channels-last throughout: both
// layers' step passes in NCHW against NHWC plus only the conversions at
// the network's edges (the weights in and their gradients out, the pooled
// output out and its gradient in; bn, ReLU and pooling taken as costing the
// same in either layout). No target: the rows decide whether channels-last
// would pay, converted at each layer or at the network's edges
// (docs/gpu.md).
// Usage: dptrain_conv_layout [--device N] [--rows N] [--rounds N] [--passes N]
//   (--rows, --rounds, --passes: 128, 5, 20; smaller only for a quick run)
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cudnn/conv_algorithms.hpp"
#include "backends/cuda/cudnn/cudnn_handles.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "dptrain/common/error.hpp"

namespace {

using namespace dptrain;
using namespace dptrain::cuda;

constexpr int kKernel = 3;

struct Options {
  int device = 0, rows = 128, rounds = 5, passes = 20;
};

struct Layer {
  int in, out, size;  // channels in and out, square extent
};
constexpr std::array<Layer, 2> kLayers{{{1, 32, 28}, {32, 64, 14}}};
constexpr std::array<ConvPass, 3> kPassKinds{ConvPass::kForward, ConvPass::kBackwardData,
                                             ConvPass::kBackwardFilter};

// One layer's descriptors, buffers and per-pass algorithms in one layout;
// w_tensor describes the filter's memory as a tensor [K, C, R, S] of the
// same format (KCRS or KRSC), for the conversions.
struct Setup {
  TensorDescriptor x, y, w_tensor;
  FilterDescriptor w;
  std::array<ConvolutionDescriptor, 3> conv;
  std::array<std::optional<AlgorithmChoice>, 3> algo;
  DeviceMemory xs, ys, ws, workspace;
};

Setup make_setup(cudnnHandle_t h, int rows, const Layer& l, cudnnTensorFormat_t format,
                 ConvArithmetic a) {
  const bool bf16 = a == ConvArithmetic::kBf16;
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const std::size_t bytes = bf16 ? 2 : 4;
  Setup s;
  s.x = TensorDescriptor::create();
  s.y = TensorDescriptor::create();
  s.w_tensor = TensorDescriptor::create();
  s.w = FilterDescriptor::create();
  DPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x.get(), format, type, rows, l.in, l.size, l.size));
  DPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.y.get(), format, type, rows, l.out, l.size, l.size));
  DPT_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(s.w_tensor.get(), format, type, l.out, l.in, kKernel, kKernel));
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
  const std::size_t x_n = std::size_t(rows) * l.in * l.size * l.size;
  const std::size_t y_n = std::size_t(rows) * l.out * l.size * l.size;
  s.xs = DeviceMemory(x_n * bytes);
  s.ys = DeviceMemory(y_n * bytes);
  s.ws = DeviceMemory(std::size_t(l.out) * l.in * kKernel * kKernel * bytes);
  s.workspace = DeviceMemory(std::max<std::size_t>(workspace, 1));
  // Small finite values in either type (bytes 0x3c: about 0.0115), set
  // before the timed stream (non-blocking) runs anything.
  for (const DeviceMemory* m : {&s.xs, &s.ys, &s.ws})
    DPT_CUDA_CHECK(cudaMemsetAsync(m->get(), 0x3c, m->bytes(), nullptr));
  DPT_CUDA_CHECK(cudaDeviceSynchronize());
  return s;
}

void run_pass(cudnnHandle_t h, const Setup& s, std::size_t p) {
  const float one = 1.0f, zero = 0.0f;
  const AlgorithmChoice& c = *s.algo[p];
  void* ws = s.workspace.get();
  switch (kPassKinds[p]) {
    case ConvPass::kForward:
      DPT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, s.x.get(), s.xs.get(), s.w.get(), s.ws.get(),
                                              s.conv[p].get(),
                                              static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws,
                                              c.workspace, &zero, s.y.get(), s.ys.get()));
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
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws, c.workspace, &zero, s.w.get(),
          s.ws.get()));
      break;
  }
}

// What NHWC convolutions between NCHW layers add to a step: the inputs
// converted in (x, dy, w), the outputs back (y, dx, dw); the first layer
// has no dx.
void convert_at_edges(cudnnHandle_t h, const Setup& nchw, const Setup& nhwc, bool first) {
  const float one = 1.0f, zero = 0.0f;
  const auto convert = [&](const TensorDescriptor& from_d, const DeviceMemory& from,
                           const TensorDescriptor& to_d, const DeviceMemory& to) {
    DPT_CUDNN_CHECK(
        cudnnTransformTensor(h, &one, from_d.get(), from.get(), &zero, to_d.get(), to.get()));
  };
  convert(nchw.x, nchw.xs, nhwc.x, nhwc.xs);                // x in
  convert(nchw.w_tensor, nchw.ws, nhwc.w_tensor, nhwc.ws);  // w in
  convert(nhwc.y, nhwc.ys, nchw.y, nchw.ys);                // y out
  convert(nchw.y, nchw.ys, nhwc.y, nhwc.ys);                // dy in
  if (!first) convert(nhwc.x, nhwc.xs, nchw.x, nchw.xs);    // dx out
  convert(nhwc.w_tensor, nhwc.ws, nchw.w_tensor, nchw.ws);  // dw out
}

// Median over rounds of the mean time of run(), in ms.
double time_ops(const Options& o, cudaStream_t stream, const std::function<void()>& run) {
  const Event start = Event::create_timed(), stop = Event::create_timed();
  for (int i = 0; i < 3; ++i) run();  // warm-up
  std::vector<double> rounds;
  for (int r = 0; r < o.rounds; ++r) {
    DPT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    for (int i = 0; i < o.passes; ++i) run();
    DPT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    DPT_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    DPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    rounds.push_back(ms / o.passes);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

const char* precision_name(ConvArithmetic a) {
  return a == ConvArithmetic::kBf16 ? "bf16" : "tf32";
}

// Rows cuDNN refused to make (a descriptor, a pass or a conversion): one
// status row, quotes in the message made single.
void refused_row_named(const std::string& what, ConvArithmetic a, std::string why) {
  std::replace(why.begin(), why.end(), '"', '\'');
  std::replace(why.begin(), why.end(), '\n', ' ');
  std::printf("{\"row\":\"%s (%s)\",\"status\":\"cuDNN refused\",\"note\":\"%s\"}\n", what.c_str(),
              precision_name(a), why.c_str());
  std::fflush(stdout);
}

void refused_row(const Layer& l, ConvArithmetic a, const std::string& why) {
  char name[96];
  std::snprintf(name, sizeof name, "conv %d->%d on %dx%d", l.in, l.out, l.size, l.size);
  refused_row_named(name, a, why);
}

// A layer's passes of a training step, summed in each layout (the first
// layer has no backward data pass); complete when every pass had an
// algorithm in both.
struct StepTimes {
  double nchw = 0.0, nhwc = 0.0;
  bool complete = true;
};

// The per-pass rows of one layer and its step row (the passes in NHWC plus
// the conversions at the layer's edges); returns the step's pass times.
StepTimes print_layer_rows(const Options& o, cudnnHandle_t h, cudaStream_t stream, const Layer& l,
                           bool first, ConvArithmetic a, const Setup& nchw, const Setup& nhwc) {
  char layer[96];
  std::snprintf(layer, sizeof layer, "conv %d->%d on %dx%d", l.in, l.out, l.size, l.size);
  const char* missing = nullptr;
  StepTimes step;
  for (std::size_t p = 0; p < kPassKinds.size(); ++p) {
    char name[160];
    std::snprintf(name, sizeof name, "%s %s, NCHW vs NHWC (%s)", layer, pass_name(kPassKinds[p]),
                  precision_name(a));
    if (!nchw.algo[p] || !nhwc.algo[p]) {
      missing = !nchw.algo[p] ? "NCHW" : "NHWC";
      std::printf("{\"row\":\"%s\",\"status\":\"no deterministic algorithm\",\"note\":\"in %s\"}\n",
                  name, missing);
      continue;
    }
    const double ours = time_ops(o, stream, [&] { run_pass(h, nchw, p); });
    const double base = time_ops(o, stream, [&] { run_pass(h, nhwc, p); });
    if (!(first && kPassKinds[p] == ConvPass::kBackwardData)) {
      step.nchw += ours;
      step.nhwc += base;
    }
    std::printf(
        "{\"row\":\"%s\",\"ours\":%.4f,\"baseline\":%.4f,\"unit\":\"ms\",\"ratio\":%.4f,"
        "\"target\":\"none: above 1, channels-last is faster\",\"note\":\"%d rows, 3x3, "
        "padding 1; algorithms %d and %d\"}\n",
        name, ours, base, ours / base, o.rows, nchw.algo[p]->algo, nhwc.algo[p]->algo);
  }
  char name[200];
  std::snprintf(name, sizeof name, "%s, its passes of a step: NCHW vs NHWC with conversions (%s)",
                layer, precision_name(a));
  step.complete = missing == nullptr;
  if (!step.complete) {
    std::printf("{\"row\":\"%s\",\"status\":\"no deterministic algorithm\",\"note\":\"in %s\"}\n",
                name, missing);
  } else {
    const double convert = time_ops(o, stream, [&] { convert_at_edges(h, nchw, nhwc, first); });
    std::printf(
        "{\"row\":\"%s\",\"ours\":%.4f,\"baseline\":%.4f,\"unit\":\"ms\",\"ratio\":%.4f,"
        "\"target\":\"none: above 1, converting at the layer's edges pays\",\"note\":\"%s; "
        "NHWC %.4f ms in passes + %.4f ms converting\"}\n",
        name, step.nchw, step.nhwc + convert, step.nchw / (step.nhwc + convert),
        first ? "forward, backward filter" : "forward, backward data and filter", step.nhwc,
        convert);
  }
  std::fflush(stdout);
  return step;
}

// The tensor at the network's far edge in the demo CNN: the last conv
// block's output after its 2x2 max pooling, where flatten hands it to the
// dense head (NCHW order is the dense layer's feature order).
struct NetworkEdge {
  TensorDescriptor nchw, nhwc;
  DeviceMemory nchw_data, nhwc_data;
};

NetworkEdge make_network_edge(int rows, ConvArithmetic a) {
  const Layer& last = kLayers.back();
  const int size = last.size / 2;
  const cudnnDataType_t type = a == ConvArithmetic::kBf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const std::size_t bytes =
      std::size_t(rows) * last.out * size * size * (a == ConvArithmetic::kBf16 ? 2 : 4);
  NetworkEdge e{TensorDescriptor::create(), TensorDescriptor::create(), DeviceMemory(bytes),
                DeviceMemory(bytes)};
  DPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e.nchw.get(), CUDNN_TENSOR_NCHW, type, rows, last.out,
                                             size, size));
  DPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e.nhwc.get(), CUDNN_TENSOR_NHWC, type, rows, last.out,
                                             size, size));
  for (const DeviceMemory* m : {&e.nchw_data, &e.nhwc_data})
    DPT_CUDA_CHECK(cudaMemsetAsync(m->get(), 0x3c, m->bytes(), nullptr));
  DPT_CUDA_CHECK(cudaDeviceSynchronize());
  return e;
}

// What a network channels-last throughout adds to a step: each weight
// converted in and its gradient out (the parameters stay in torch's order),
// and the activation and its gradient at the far edge. The input needs
// nothing: one channel, where NCHW and NHWC are the same bytes.
void convert_at_network_edges(cudnnHandle_t h, const std::vector<Setup>& nchw,
                              const std::vector<Setup>& nhwc, const NetworkEdge& edge) {
  const float one = 1.0f, zero = 0.0f;
  for (std::size_t i = 0; i < nchw.size(); ++i) {
    DPT_CUDNN_CHECK(cudnnTransformTensor(h, &one, nchw[i].w_tensor.get(), nchw[i].ws.get(), &zero,
                                         nhwc[i].w_tensor.get(), nhwc[i].ws.get()));
    DPT_CUDNN_CHECK(cudnnTransformTensor(h, &one, nhwc[i].w_tensor.get(), nhwc[i].ws.get(), &zero,
                                         nchw[i].w_tensor.get(), nchw[i].ws.get()));
  }
  DPT_CUDNN_CHECK(cudnnTransformTensor(h, &one, edge.nhwc.get(), edge.nhwc_data.get(), &zero,
                                       edge.nchw.get(), edge.nchw_data.get()));  // out
  DPT_CUDNN_CHECK(cudnnTransformTensor(h, &one, edge.nchw.get(), edge.nchw_data.get(), &zero,
                                       edge.nhwc.get(), edge.nhwc_data.get()));  // gradient in
}

// The row for channels-last throughout the conv stack, converted only at the
// network's edges: both layers' step passes in NCHW against NHWC plus those
// conversions. Batch norm, ReLU and pooling between them are taken as costing
// the same in either layout (elementwise, or one pass over the tensor).
void print_network_row(const Options& o, cudnnHandle_t h, cudaStream_t stream, ConvArithmetic a,
                       const std::vector<Setup>& nchw, const std::vector<Setup>& nhwc,
                       const std::vector<StepTimes>& steps) {
  const NetworkEdge edge = make_network_edge(o.rows, a);
  StepTimes all;
  for (const StepTimes& s : steps) {
    all.nchw += s.nchw;
    all.nhwc += s.nhwc;
  }
  const double convert =
      time_ops(o, stream, [&] { convert_at_network_edges(h, nchw, nhwc, edge); });
  std::printf(
      "{\"row\":\"conv stack of %zu layers channels-last throughout: NCHW vs NHWC with "
      "conversions at the network's edges (%s)\",\"ours\":%.4f,\"baseline\":%.4f,\"unit\":\"ms\","
      "\"ratio\":%.4f,\"target\":\"none: above 1, channels-last throughout pays\",\"note\":\"the "
      "layers' step passes, bn/relu/pooling taken as equal; NHWC %.4f ms in passes + %.4f ms "
      "converting\"}\n",
      nchw.size(), precision_name(a), all.nchw, all.nhwc + convert, all.nchw / (all.nhwc + convert),
      all.nhwc, convert);
  std::fflush(stdout);
}

// All rows of one precision: each layer's, then the network's when every
// layer has them.
void print_rows(const Options& o, cudnnHandle_t h, cudaStream_t stream, ConvArithmetic a) {
  std::vector<Setup> nchw, nhwc;
  std::vector<StepTimes> steps;
  bool complete = true;
  for (std::size_t i = 0; i < kLayers.size(); ++i) {
    try {
      Setup in_nchw = make_setup(h, o.rows, kLayers[i], CUDNN_TENSOR_NCHW, a);
      Setup in_nhwc = make_setup(h, o.rows, kLayers[i], CUDNN_TENSOR_NHWC, a);
      steps.push_back(print_layer_rows(o, h, stream, kLayers[i], i == 0, a, in_nchw, in_nhwc));
      complete = complete && steps.back().complete;  // else the step row says what is missing
      nchw.push_back(std::move(in_nchw));
      nhwc.push_back(std::move(in_nhwc));
    } catch (const Error& e) {  // NHWC is only measured: a refusal is a row, not the end
      refused_row(kLayers[i], a, e.what());
      DPT_CUDA_CHECK(cudaDeviceSynchronize());  // a refusal, not a fault of the device
      complete = false;
    }
  }
  if (!complete) return;
  try {
    print_network_row(o, h, stream, a, nchw, nhwc, steps);
  } catch (const Error& e) {
    refused_row_named("conv stack", a, e.what());
    DPT_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int* into = arg == "--device"   ? &o.device
                : arg == "--rows"   ? &o.rows
                : arg == "--rounds" ? &o.rounds
                : arg == "--passes" ? &o.passes
                                    : nullptr;
    if (!into || i + 1 == argc)
      throw Error(ExitCode::kUsage,
                  "usage: dptrain_conv_layout [--device N] [--rows N] [--rounds N] [--passes N]");
    *into = std::stoi(argv[++i]);
    if (*into < (into == &o.device ? 0 : 1))
      throw Error(ExitCode::kUsage, arg + " " + argv[i] + ": out of range");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "dptrain_conv_layout: no GPU visible\n");
      return 77;
    }
    DPT_CUDA_CHECK(cudaSetDevice(o.device));
    const Stream stream = Stream::create();
    const CudnnHandle handle = CudnnHandle::create();
    DPT_CUDNN_CHECK(cudnnSetStream(handle.get(), stream.get()));
    for (const ConvArithmetic a : {ConvArithmetic::kTf32, ConvArithmetic::kBf16})
      print_rows(o, handle.get(), stream.get(), a);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "dptrain_conv_layout: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {  // a value not a number, out of memory
    std::fprintf(stderr, "dptrain_conv_layout: %s\n", e.what());
    return 1;
  }
}
