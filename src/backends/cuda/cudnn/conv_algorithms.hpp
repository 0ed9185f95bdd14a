// Implements: the choice of cuDNN's algorithm for each pass of a
// convolution (internal to src/backends/cuda/cudnn/). Deterministic twice over: the
// choice comes from cuDNN's heuristics (cudnnGet*Algorithm_v7, no timing,
// so the same on every run and rank), and only algorithms cuDNN reports as
// CUDNN_DETERMINISTIC qualify, so a pass repeats bit for bit.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <optional>

namespace dptrain::cuda {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// What the tensor cores may do, per --precision: kFma is plain fp32 (no
// TF32), kTf32 allows TF32 on fp32 tensors, kBf16 runs on bf16 tensors.
enum class ConvArithmetic { kFma, kTf32, kBf16 };

// The descriptors of one row count, in the data type of the arithmetic:
// x the input, y the output (dy and dx of the backward passes alike).
struct ConvOperands {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
};

// The most workspace one pass may take: a pass that would need more is
// better served by another algorithm.
constexpr std::size_t kMaxConvWorkspace = std::size_t(1) << 30;

struct AlgorithmChoice {
  int algo = 0;  // the pass's cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;  // bytes
};

// Sets conv's math type for the arithmetic, asks the heuristics, and takes
// the first deterministic algorithm that cuDNN can run (its workspace size
// query succeeds), preferring the exact-sum families (implicit GEMM and
// friends) to FFT and Winograd, which trade accuracy for speed, and under
// kTf32 tensor-core kernels to FMA ones. On success conv keeps the chosen
// math type, which the pass must run with. Only algorithms of at most
// max_workspace bytes qualify. nullopt when none does.
std::optional<AlgorithmChoice> choose_algorithm(cudnnHandle_t handle, ConvPass pass,
                                                const ConvOperands& o,
                                                cudnnConvolutionDescriptor_t conv,
                                                ConvArithmetic arithmetic,
                                                std::size_t max_workspace);

const char* pass_name(ConvPass pass);  // "forward", "backward data", "backward filter"

}  // namespace dptrain::cuda
