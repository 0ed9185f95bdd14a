// Implements: the per-pass algorithm choice of the cuDNN convolution plan
// (conv_algorithms.hpp), over cuDNN's legacy heuristics API.
#include "backends/cuda/cudnn/conv_algorithms.hpp"

#include <algorithm>
#include <vector>

#include "backends/cuda/cudnn/cudnn_handles.hpp"

namespace dptrain::cuda {
namespace {

// fp32 is restricted to FMA kernels (cuDNN's default would allow TF32 on
// Ampere and later); TF32 is cuDNN's default for fp32 tensors there; bf16
// tensors need tensor-op math (fp32 accumulation: the descriptor's compute
// type is CUDNN_DATA_FLOAT).
cudnnMathType_t requested_math(ConvArithmetic a) {
  switch (a) {
    case ConvArithmetic::kFma: return CUDNN_FMA_MATH;
    case ConvArithmetic::kTf32: return CUDNN_DEFAULT_MATH;
    case ConvArithmetic::kBf16: return CUDNN_TENSOR_OP_MATH;
  }
  return CUDNN_FMA_MATH;
}

// FFT and Winograd transform the operands: their error is not bounded by
// the terms' magnitudes as a sum of products is.
bool transforms(ConvPass pass, int algo) {
  switch (pass) {
    case ConvPass::kForward:
      return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case ConvPass::kBackwardData:
      return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case ConvPass::kBackwardFilter:
      return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return true;
}

struct Candidate {
  int algo;
  cudnnMathType_t math;
  int rank;  // lower first; ties keep the heuristics' order
};

// The qualifying results of one heuristics query, best first.
template <typename Perf>
std::vector<Candidate> rank_results(ConvPass pass, const std::vector<Perf>& results, int n,
                                    ConvArithmetic a, std::size_t max_workspace) {
  std::vector<Candidate> out;
  for (int i = 0; i < n; ++i) {
    const Perf& r = results[static_cast<std::size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC) continue;
    if (r.memory > max_workspace) continue;
    // ALLOW_CONVERSION may round fp32 operands to fp16 (|x| > 65504 -> inf):
    // never. Under fp32 only results for FMA math qualify (a result's
    // status and determinism are those of its math type), run FMA-only.
    if (r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (a == ConvArithmetic::kFma && r.mathType == CUDNN_TENSOR_OP_MATH) continue;
    const int algo = static_cast<int>(r.algo);
    const cudnnMathType_t math = a == ConvArithmetic::kFma ? CUDNN_FMA_MATH : r.mathType;
    const bool fma_under_tf32 = a == ConvArithmetic::kTf32 && math == CUDNN_FMA_MATH;
    out.push_back({algo, math, (transforms(pass, algo) ? 2 : 0) + (fma_under_tf32 ? 1 : 0)});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& l, const Candidate& r) { return l.rank < r.rank; });
  return out;
}

// Runs one heuristics query (query(count, &returned, results)). A query
// that cuDNN refuses outright means no algorithm for bf16 (the caller falls
// back); for fp32 tensors it is a fault.
template <typename Perf, typename Query>
std::vector<Candidate> ask(ConvPass pass, int max_count, ConvArithmetic a,
                           std::size_t max_workspace, Query query) {
  std::vector<Perf> results(static_cast<std::size_t>(std::max(1, max_count)));
  int n = 0;
  const cudnnStatus_t rc = query(static_cast<int>(results.size()), &n, results.data());
  if (rc != CUDNN_STATUS_SUCCESS && a == ConvArithmetic::kBf16) return {};
  DPT_CUDNN_CHECK(rc);
  return rank_results(pass, results, std::min(n, static_cast<int>(results.size())), a,
                      max_workspace);
}

std::vector<Candidate> candidates(cudnnHandle_t h, ConvPass pass, const ConvOperands& o,
                                  cudnnConvolutionDescriptor_t conv, ConvArithmetic a,
                                  std::size_t most) {
  int count = 0;
  switch (pass) {
    case ConvPass::kForward:
      DPT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      return ask<cudnnConvolutionFwdAlgoPerf_t>(pass, count, a, most, [&](int m, int* n, auto* r) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, o.x, o.w, conv, o.y, m, n, r);
      });
    case ConvPass::kBackwardData:
      DPT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      return ask<cudnnConvolutionBwdDataAlgoPerf_t>(
          pass, count, a, most, [&](int m, int* n, auto* r) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, o.w, o.y, conv, o.x, m, n, r);
          });
    case ConvPass::kBackwardFilter:
      DPT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      return ask<cudnnConvolutionBwdFilterAlgoPerf_t>(
          pass, count, a, most, [&](int m, int* n, auto* r) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, o.x, o.y, conv, o.w, m, n, r);
          });
  }
  return {};
}

// With conv's current math type; anything but success rules the algorithm out.
cudnnStatus_t workspace_size(cudnnHandle_t h, ConvPass pass, const ConvOperands& o,
                             cudnnConvolutionDescriptor_t conv, int algo, std::size_t* bytes) {
  switch (pass) {
    case ConvPass::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(
          h, o.x, o.w, conv, o.y, static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case ConvPass::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, o.w, o.y, conv, o.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case ConvPass::kBackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, o.x, o.y, conv, o.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

}  // namespace

std::optional<AlgorithmChoice> choose_algorithm(cudnnHandle_t handle, ConvPass pass,
                                                const ConvOperands& o,
                                                cudnnConvolutionDescriptor_t conv,
                                                ConvArithmetic arithmetic,
                                                std::size_t max_workspace) {
  DPT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, requested_math(arithmetic)));
  for (const Candidate& c : candidates(handle, pass, o, conv, arithmetic, max_workspace)) {
    DPT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, c.math));
    std::size_t bytes = 0;
    if (workspace_size(handle, pass, o, conv, c.algo, &bytes) == CUDNN_STATUS_SUCCESS &&
        bytes <= max_workspace)
      return AlgorithmChoice{c.algo, c.math, bytes};
  }
  return std::nullopt;
}

const char* pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward: return "forward";
    case ConvPass::kBackwardData: return "backward data";
    case ConvPass::kBackwardFilter: return "backward filter";
  }
  return "?";
}

}  // namespace dptrain::cuda
