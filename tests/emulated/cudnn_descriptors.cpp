// Implements: the emulated cuDNN's library calls, handle and descriptors
// (include/cudnn.h), checked as cuDNN documents them: a descriptor's sizes
// and strides positive, a tensor of 4 or 5 dimensions (the emulation's
// range; cuDNN's is 4 to 8) and at most 2^31 - 1 values, a filter in NCHW
// (KCRS) or NHWC (KRSC) format, padding >= 0, strides and dilations >= 1.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "cudnn_emulated.hpp"

using dptrain_emu::cudnn::refuse;

namespace {

template <typename T>
cudnnStatus_t create(T** d) {
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no place for the descriptor");
  *d = new T;
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t destroy(T* d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

bool emulated_type(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16; }

// 4 or 5 dimensions, each >= 1, at most 2^31 - 1 values; what.
cudnnStatus_t check_dims(const char* what, int rank, const int dims[]) {
  if (rank < 4 || rank > 5)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, std::string(what) + " of " + std::to_string(rank) +
                                                  " dimensions (the emulation takes 4 or 5)");
  std::int64_t values = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 1)
      return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": dimension " + std::to_string(i) +
                                                " is " + std::to_string(dims[i]));
    values *= dims[i];
    if (values > std::numeric_limits<int>::max())
      return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                    std::string(what) + " of more than 2^31 - 1 values");
  }
  return CUDNN_STATUS_SUCCESS;
}

// The spatial parameters of a convolution or pooling: spatial entries,
// each at least least.
cudnnStatus_t check_spatial(const char* what, int spatial, const int values[], int least) {
  for (int i = 0; i < spatial; ++i)
    if (values[i] < least)
      return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + "[" + std::to_string(i) + "] is " +
                                                std::to_string(values[i]));
  return CUDNN_STATUS_SUCCESS;
}

template <std::size_t N>
void copy_into(std::array<int, N>& to, const int* from, int n) {
  to.fill(0);
  std::copy(from, from + n, to.begin());
}

}  // namespace

std::size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND: return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT:
      return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

void cudnnGetLastErrorString(char* message, std::size_t max_size) {
  if (!message || !max_size) return;
  const std::string last = dptrain_emu::cudnn::take_last_error();
  const std::size_t n = std::min(last.size(), max_size - 1);
  std::memcpy(message, last.data(), n);
  message[n] = '\0';
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) { return create(h); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { return destroy(h); }
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int rank,
                                         const int dims[], const int strides[]) {
  if (!d || !dims || !strides) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "tensor: null");
  if (!emulated_type(type)) return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "tensor: type");
  cudnnStatus_t rc = check_dims("tensor", rank, dims);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_spatial("tensor stride", rank, strides, 1);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  d->type = type;
  d->rank = rank;
  copy_into(d->dim, dims, rank);
  copy_into(d->stride, strides, rank);
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

// N, C, H, W packed in the format's order, as cuDNN sets them.
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor: the emulation takes NCHW or NHWC");
  const int dims[4] = {n, c, h, w};
  if (format == CUDNN_TENSOR_NCHW) {
    const int strides[4] = {c * h * w, h * w, w, 1};
    return cudnnSetTensorNdDescriptor(d, type, 4, dims, strides);
  }
  const int strides[4] = {h * w * c, 1, w * c, c};
  return cudnnSetTensorNdDescriptor(d, type, 4, dims, strides);
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int rank, const int dims[]) {
  if (!d || !dims) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "filter: null");
  if (!emulated_type(type)) return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "filter: type");
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                  "filter: the emulation takes NCHW (KCRS) or NHWC (KRSC)");
  const cudnnStatus_t rc = check_dims("filter", rank, dims);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  d->type = type;
  d->format = format;
  d->rank = rank;
  copy_into(d->dim, dims, rank);
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  const int dims[4] = {k, c, h, w};
  return cudnnSetFilterNdDescriptor(d, type, format, 4, dims);
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  return create(d);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  return destroy(d);
}
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int spatial,
                                              const int pad[], const int stride[],
                                              const int dilation[], cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (!d || !pad || !stride || !dilation)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "convolution: null");
  if (spatial < 2 || spatial > 3)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "convolution of " + std::to_string(spatial) +
                                                  " spatial dimensions (the emulation: 2, 3)");
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return refuse(CUDNN_STATUS_BAD_PARAM, "convolution: mode");
  if (!emulated_type(compute)) return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "compute type");
  cudnnStatus_t rc = check_spatial("convolution padding", spatial, pad, 0);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_spatial("convolution stride", spatial, stride, 1);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_spatial("convolution dilation", spatial, dilation, 1);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  d->spatial = spatial;
  copy_into(d->pad, pad, spatial);
  copy_into(d->stride, stride, spatial);
  copy_into(d->dilation, dilation, spatial);
  d->mode = mode;
  d->compute = compute;
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                              int u, int v, int dilation_h, int dilation_w,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  const int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dilation[2] = {dilation_h, dilation_w};
  return cudnnSetConvolutionNdDescriptor(d, 2, pad, stride, dilation, mode, compute);
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (!d) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "convolution: null");
  if (math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH)
    return refuse(CUDNN_STATUS_BAD_PARAM, "math type " + std::to_string(int(math)));
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int rank,
                                                    int out[]) {
  dptrain_emu::cudnn::ConvShape s;
  const cudnnStatus_t rc = dptrain_emu::cudnn::conv_shape(x, w, conv, &s);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (rank != x->rank)
    return refuse(CUDNN_STATUS_BAD_PARAM, "output dimensions asked: " + std::to_string(rank) +
                                              ", the input has " + std::to_string(x->rank));
  for (int i = 0, j = 0; i < 5; ++i)
    if (!(rank == 4 && i == 2)) out[j++] = s.y.dim[std::size_t(i)];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetPoolingNdDescriptor(cudnnPoolingDescriptor_t d, const cudnnPoolingMode_t mode,
                                          const cudnnNanPropagation_t nan, int spatial,
                                          const int window[], const int pad[], const int stride[]) {
  if (!d || !window || !pad || !stride)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "pooling: null");
  if (spatial < 2 || spatial > 3)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "pooling of " + std::to_string(spatial) +
                                                  " spatial dimensions (the emulation: 2, 3)");
  if (mode < CUDNN_POOLING_MAX || mode > CUDNN_POOLING_MAX_DETERMINISTIC)
    return refuse(CUDNN_STATUS_BAD_PARAM, "pooling: mode");
  cudnnStatus_t rc = check_spatial("pooling window", spatial, window, 1);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_spatial("pooling padding", spatial, pad, 0);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_spatial("pooling stride", spatial, stride, 1);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  d->mode = mode;
  d->nan = nan;
  d->spatial = spatial;
  copy_into(d->window, window, spatial);
  copy_into(d->pad, pad, spatial);
  copy_into(d->stride, stride, spatial);
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}
