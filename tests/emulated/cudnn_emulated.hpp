// Implements: what the files of the emulated cuDNN (include/cudnn.h) share:
// the descriptor objects, the layouts the passes index by, and the checks a
// call is held to before its work is queued on the handle's stream.
//
// What the emulation holds a call to (each a refusal with a status and a
// last-error message that names the operand, as cuDNN 9's are):
//   - descriptors set before use; tensors of 4 or 5 dimensions (2-D and 3-D
//     spatial; cuDNN's own limit is 4 to 8), dimensions and strides >= 1,
//     at most 2^31 - 1 values; filters packed in NCHW (KCRS) or NHWC
//     (KRSC) format; 4-d tensors set by format (NCHW or NHWC) or strides;
//   - a convolution's input, filter and output agree: ranks, the channels
//     of input and filter, the output shape cuDNN computes, one data type
//     (FLOAT, or BFLOAT16 with a FLOAT compute type and tensor-op math);
//   - every data pointer non-null, aligned to its element and lying with
//     its whole span inside one device allocation; 16-byte aligned where the
//     math type lets tensor cores run; the output overlapping no input;
//   - the algorithm one the heuristics offer for these descriptors under
//     the descriptor's current math type, and a workspace of at least the
//     bytes its size query returns.
// How it computes (cudnn_convolution.cpp, cudnn_tensor_ops.cpp): sums of
// products in fp32 from the operands as stored (bf16 read exactly), under a
// math type that allows tensor ops on FLOAT data every operand rounded to
// TF32 first; out = alpha * result + beta * out, out not read when beta is
// 0; the workspace overwritten with NaN by every pass that has one. The
// algorithms cuDNN reports non-deterministic add their partial sums in an
// order that changes from call to call, and the transforming ones (FFT,
// Winograd) carry an error of 2^-14 of the output's largest magnitude, the
// form of theirs (bounded by the norm, not by each sum's own terms).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cudnn.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;  // the legacy default stream until cudnnSetStream
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int rank = 0;
  std::array<int, CUDNN_DIM_MAX> dim{}, stride{};
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;  // KCRS, or NHWC: KRSC
  int rank = 0;
  std::array<int, CUDNN_DIM_MAX> dim{};  // K, C, (T,) R, S whatever the format
};
struct cudnnConvolutionStruct {
  bool set = false;
  int spatial = 0;
  std::array<int, 3> pad{}, stride{}, dilation{};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // cuDNN's default
};
struct cudnnPoolingStruct {
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int spatial = 0;
  std::array<int, 3> window{}, pad{}, stride{};
};

namespace dptrain_emu::cudnn {

// Records why (cudnnGetLastErrorString) and returns status.
cudnnStatus_t refuse(cudnnStatus_t status, const std::string& why);
// The message of the last refusal on this thread, cleared.
std::string take_last_error();

std::size_t element_bytes(cudnnDataType_t type);

inline float load(const void* p, cudnnDataType_t type, std::ptrdiff_t i) {
  return type == CUDNN_DATA_BFLOAT16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                                     : static_cast<const float*>(p)[i];
}
inline void store(void* p, cudnnDataType_t type, std::ptrdiff_t i, float v) {
  if (type == CUDNN_DATA_BFLOAT16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// A tensor or filter as the passes index it: N, C, D, H, W (a 2-D one has
// D = 1), with the element strides of each.
struct Layout {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::array<int, 5> dim{1, 1, 1, 1, 1};
  std::array<std::ptrdiff_t, 5> stride{};
  std::ptrdiff_t at(int n, int c, int d, int h, int w) const {
    return n * stride[0] + c * stride[1] + d * stride[2] + h * stride[3] + w * stride[4];
  }
  std::size_t values() const;
  std::size_t span_bytes() const;  // from the first element to one past the furthest
  bool same_shape(const Layout& o) const { return dim == o.dim; }
};

// Calls f(value index, n, c, d, h, w) over a layout's elements, W fastest.
template <typename F>
void each(const Layout& l, F f) {
  std::size_t i = 0;
  for (int n = 0; n < l.dim[0]; ++n)
    for (int c = 0; c < l.dim[1]; ++c)
      for (int d = 0; d < l.dim[2]; ++d)
        for (int h = 0; h < l.dim[3]; ++h)
          for (int w = 0; w < l.dim[4]; ++w) f(i++, n, c, d, h, w);
}

// out = alpha r + beta out over out's elements (r in value order); out is
// not read when beta is 0.
void write_out(void* out, const Layout& l, const std::vector<float>& r, float alpha, float beta);

// The layout of a set descriptor, or a refusal naming it.
cudnnStatus_t layout_of(const cudnnTensorStruct* t, const char* name, Layout* out);
cudnnStatus_t layout_of(const cudnnFilterStruct* f, const char* name, Layout* out);

// What a data pointer must be (the header's list), for span bytes from p.
cudnnStatus_t check_pointer(const char* name, const void* p, const Layout& l, bool tensor_ops);
// The span of out must not overlap that of in.
cudnnStatus_t check_apart(const char* out_name, const void* out, const Layout& lo,
                          const char* in_name, const void* in, const Layout& li);

// One convolution as its descriptors make it: x the input, w the filter,
// y the output shape cuDNN computes (packed; the passes' own output
// descriptor must match it).
struct ConvShape {
  int spatial = 2;  // 2-D or 3-D
  Layout x, w, y;
  std::array<int, 3> pad{}, stride{1, 1, 1}, dilation{1, 1, 1};  // D, H, W
  bool flip = false;  // CUDNN_CONVOLUTION mirrors the filter
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool bf16() const { return x.type == CUDNN_DATA_BFLOAT16; }
  // Whether the math type lets tensor cores run (the algorithm run decides
  // whether they do: runnable's answer, whose tensor-op math rounds FLOAT
  // operands to TF32).
  bool tensor_ops() const { return math != CUDNN_FMA_MATH; }
};
cudnnStatus_t conv_shape(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                         const cudnnConvolutionStruct* conv, ConvShape* out);
// The pass's descriptor of y (or dy) against the computed output shape.
cudnnStatus_t match_output(const ConvShape& s, const cudnnTensorStruct* y, const char* name,
                           Layout* out);

// --- algorithms (cudnn_algorithms.cpp) ---------------------------------------
enum class Pass { kForward, kBackwardData, kBackwardFilter };

// One answer of the heuristics: an algorithm of the pass and the math type
// it runs with.
struct Algorithm {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

// Every algorithm of the pass for s under s's math type, in the order the
// emulated heuristics rank them (cudnn_algorithms.cpp says why that order).
std::vector<Algorithm> heuristics(Pass pass, const ConvShape& s);
// The answer for algo that can run under s's math type, or a refusal.
cudnnStatus_t runnable(Pass pass, const ConvShape& s, int algo, Algorithm* out);
bool transforms(Pass pass, int algo);

}  // namespace dptrain_emu::cudnn
