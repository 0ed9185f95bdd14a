// Implements: the emulated cuDNN's heuristics and workspace queries
// (include/cudnn.h). The order of the answers is chosen to test the
// caller's choice, not to guess cuDNN's: for every pass the first answers
// are the ones a careful caller must pass over — the non-deterministic
// algorithms (backward data and filter ALGO_0, filter ALGO_3), then the
// transforming ones (FFT, Winograd) — and where the math type allows tensor
// ops on FLOAT tensors each GEMM-like algorithm is offered first with FMA
// math, then with tensor-op math. The emulated passes make each of those
// choices show: a non-deterministic algorithm does not repeat bit for bit,
// a transforming one carries a larger error, an FMA one leaves TF32 unused
// (cudnn_emulated.hpp). Which algorithms can run:
//   - GEMM-like ones (implicit GEMM, precomputed, GEMM; ALGO_0/1/3): any
//     shape, FLOAT under any math type, BFLOAT16 under tensor-op math only;
//     but 3-D FLOAT convolutions have FMA kernels only, as a cuDNN that
//     runs a shape on FMA kernels although TF32 is allowed (so TF32 is
//     seen both used and left unused: test_cudnn_precision.cpp);
//   - FFT and Winograd: 2-D FLOAT convolutions of stride and dilation 1
//     (Winograd 3x3 filters only), FMA math;
//   - DIRECT and backward-filter WINOGRAD: never (not in cuDNN either).
// Workspaces grow with the shape, and differ between math types, so a size
// asked under one math type and used under another is caught.
// DPTRAIN_EMULATED_CUDNN_BF16=2d offers bf16 algorithms for 2-D
// convolutions only, as a cuDNN without bf16 kernels for some shapes does,
// so that the plans' fallback to TF32 can be tested.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cudnn_emulated.hpp"

namespace dptrain_emu::cudnn {
namespace {

enum class Kind { kGemmLike, kFft, kWinograd, kNever };

struct Entry {
  int algo;
  Kind kind;
  bool deterministic;
};

const std::vector<Entry>& table(Pass pass) {
  static const std::vector<Entry> forward{
      {CUDNN_CONVOLUTION_FWD_ALGO_FFT, Kind::kFft, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, Kind::kWinograd, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, Kind::kGemmLike, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, Kind::kGemmLike, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, Kind::kGemmLike, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, Kind::kNever, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, Kind::kFft, true},
      {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, Kind::kWinograd, true}};
  static const std::vector<Entry> backward_data{
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, Kind::kGemmLike, false},
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, Kind::kFft, true},
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, Kind::kWinograd, true},
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, Kind::kGemmLike, true},
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, Kind::kFft, true},
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, Kind::kWinograd, true}};
  static const std::vector<Entry> backward_filter{
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, Kind::kGemmLike, false},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, Kind::kGemmLike, false},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, Kind::kFft, true},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, Kind::kWinograd, true},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, Kind::kGemmLike, true},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, Kind::kFft, true},
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD, Kind::kNever, true}};
  return pass == Pass::kForward        ? forward
         : pass == Pass::kBackwardData ? backward_data
                                       : backward_filter;
}

std::size_t product(const Layout& l, int from) {
  std::size_t n = 1;
  for (int i = from; i < 5; ++i) n *= static_cast<std::size_t>(l.dim[std::size_t(i)]);
  return n;
}

bool transform_fits(const ConvShape& s, Kind kind) {
  if (s.bf16() || s.spatial != 2) return false;  // FLOAT, 2-D
  for (std::size_t a = 1; a < 3; ++a) {
    if (s.stride[a] != 1 || s.dilation[a] != 1) return false;
    if (kind == Kind::kWinograd && s.w.dim[a + 2] != 3) return false;
  }
  return true;
}

std::size_t workspace_bytes(Pass pass, const Entry& e, const ConvShape& s, cudnnMathType_t math) {
  const std::size_t n = std::size_t(s.x.dim[0]), c = std::size_t(s.x.dim[1]);
  const std::size_t k = std::size_t(s.w.dim[0]), taps = product(s.w, 2);
  const std::size_t in = product(s.x, 2), out = product(s.y, 2);
  const std::size_t tensor_extra = math == CUDNN_TENSOR_OP_MATH ? 2 : 1;
  switch (e.kind) {
    case Kind::kFft: return 8 * (n * c + c * k + n * k) * 2 * in;
    case Kind::kWinograd: return 4 * 16 * (n * c + c * k + n * k) * out;
    default: break;
  }
  if (pass == Pass::kForward) {
    if (e.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return 0;
    if (e.algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM)  // the im2col of every row
      return 4 * n * c * taps * out * tensor_extra;
    return 4 * taps * out * tensor_extra;  // precomputed: an index table
  }
  if (pass == Pass::kBackwardData) return 0;  // ALGO_0, ALGO_1
  return e.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ? 0 : 4 * k * c * taps * tensor_extra;
}

bool bf16_offered(const ConvShape& s) {
  const char* only = std::getenv("DPTRAIN_EMULATED_CUDNN_BF16");
  return !(only && std::string(only) == "2d" && s.spatial != 2);
}

Algorithm answer(Pass pass, const Entry& e, const ConvShape& s, cudnnMathType_t math) {
  Algorithm a;
  a.algo = e.algo;
  a.math = math;
  a.determinism = e.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
  const bool gemm = e.kind == Kind::kGemmLike;
  const bool runs = e.kind != Kind::kNever &&
                    (gemm ? !s.bf16() || (math == CUDNN_TENSOR_OP_MATH && bf16_offered(s))
                          : transform_fits(s, e.kind) && math == CUDNN_FMA_MATH);
  a.status = runs ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
  a.memory = runs ? workspace_bytes(pass, e, s, math) : 0;
  return a;
}

}  // namespace

std::vector<Algorithm> heuristics(Pass pass, const ConvShape& s) {
  std::vector<Algorithm> out;
  for (const Entry& e : table(pass)) {
    if (!s.tensor_ops()) {
      out.push_back(answer(pass, e, s, CUDNN_FMA_MATH));
      continue;
    }
    // The math types that can run it: FMA (FLOAT only) first, then tensor ops.
    if (!s.bf16() || e.kind != Kind::kGemmLike) out.push_back(answer(pass, e, s, CUDNN_FMA_MATH));
    const bool float_volume = !s.bf16() && s.spatial == 3;  // FMA kernels only
    if (e.kind == Kind::kGemmLike && !float_volume)
      out.push_back(answer(pass, e, s, CUDNN_TENSOR_OP_MATH));
  }
  return out;
}

cudnnStatus_t runnable(Pass pass, const ConvShape& s, int algo, Algorithm* out) {
  // The descriptor's math type decides: FMA runs FMA kernels, the others
  // tensor-op ones where the algorithm has them.
  const cudnnMathType_t wanted = s.tensor_ops() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  std::vector<Algorithm> all = heuristics(pass, s);
  std::stable_partition(all.begin(), all.end(),
                        [&](const Algorithm& a) { return a.math == wanted; });
  for (const Algorithm& a : all)
    if (a.algo == algo && a.status == CUDNN_STATUS_SUCCESS) {
      *out = a;
      return CUDNN_STATUS_SUCCESS;
    }
  static const char* names[] = {"forward", "backward data", "backward filter"};
  return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                std::string(names[int(pass)]) + " algorithm " + std::to_string(algo) +
                    " cannot run these descriptors under math type " + std::to_string(int(s.math)));
}

bool transforms(Pass pass, int algo) {
  for (const Entry& e : table(pass))
    if (e.algo == algo) return e.kind == Kind::kFft || e.kind == Kind::kWinograd;
  return false;
}

}  // namespace dptrain_emu::cudnn

namespace {

using namespace dptrain_emu::cudnn;

template <typename Perf>
cudnnStatus_t fill(Pass pass, const ConvShape& s, int requested, int* returned, Perf* results) {
  if (!returned || !results || requested < 1)
    return refuse(CUDNN_STATUS_BAD_PARAM, "heuristics: no room for results");
  const std::vector<Algorithm> all = heuristics(pass, s);
  const int n = std::min(requested, static_cast<int>(all.size()));
  for (int i = 0; i < n; ++i) {
    const Algorithm& a = all[std::size_t(i)];
    Perf& r = results[i];
    r = Perf{};
    r.algo = static_cast<decltype(r.algo)>(a.algo);
    r.status = a.status;
    r.time = -1.0f;  // heuristics: not timed
    r.memory = a.memory;
    r.determinism = a.determinism;
    r.mathType = a.math;
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

// The shape of a pass, its output descriptor checked against it.
cudnnStatus_t pass_shape(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                         const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                         ConvShape* s) {
  cudnnStatus_t rc = conv_shape(x, w, conv, s);
  Layout ly;
  if (rc == CUDNN_STATUS_SUCCESS) rc = match_output(*s, y, "y", &ly);
  return rc;
}

cudnnStatus_t workspace(Pass pass, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                        const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int algo,
                        std::size_t* bytes) {
  ConvShape s;
  Algorithm a;
  cudnnStatus_t rc = pass_shape(x, w, conv, y, &s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = runnable(pass, s, algo, &a);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!bytes) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "workspace size: null");
  *bytes = a.memory;
  return CUDNN_STATUS_SUCCESS;
}

constexpr int kMaxAnswers = 2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT;  // two math types each

}  // namespace

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = kMaxAnswers;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = kMaxAnswers;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = kMaxAnswers;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y,
                                                     const int requested, int* returned,
                                                     cudnnConvolutionFwdAlgoPerf_t* results) {
  ConvShape s;
  const cudnnStatus_t rc = pass_shape(x, w, conv, y, &s);
  return rc != CUDNN_STATUS_SUCCESS ? rc : fill(Pass::kForward, s, requested, returned, results);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  ConvShape s;
  const cudnnStatus_t rc = pass_shape(dx, w, conv, dy, &s);
  return rc != CUDNN_STATUS_SUCCESS ? rc
                                    : fill(Pass::kBackwardData, s, requested, returned, results);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  ConvShape s;
  const cudnnStatus_t rc = pass_shape(x, dw, conv, dy, &s);
  return rc != CUDNN_STATUS_SUCCESS ? rc
                                    : fill(Pass::kBackwardFilter, s, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y,
    cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
  return workspace(Pass::kForward, x, w, conv, y, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
  return workspace(Pass::kBackwardData, dx, w, conv, dy, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
  return workspace(Pass::kBackwardFilter, x, dw, conv, dy, algo, bytes);
}
