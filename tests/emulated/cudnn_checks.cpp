// Implements: the shared checks of the emulated cuDNN (cudnn_emulated.hpp):
// descriptors to layouts, pointers, the convolution's shapes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cudnn_emulated.hpp"
#include "device_emulator.hpp"

namespace dptrain_emu::cudnn {
namespace {

thread_local std::string t_last_error;

std::string text(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

}  // namespace

cudnnStatus_t refuse(cudnnStatus_t status, const std::string& why) {
  t_last_error = std::string("emulated cuDNN: ") + why;
  return status;
}

std::string take_last_error() {
  std::string last;
  last.swap(t_last_error);
  return last;
}

std::size_t element_bytes(cudnnDataType_t type) { return type == CUDNN_DATA_BFLOAT16 ? 2 : 4; }

std::size_t Layout::values() const {
  std::size_t n = 1;
  for (int d : dim) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t Layout::span_bytes() const {
  std::ptrdiff_t last = 0;
  for (std::size_t i = 0; i < dim.size(); ++i) last += (dim[i] - 1) * stride[i];
  return static_cast<std::size_t>(last + 1) * element_bytes(type);
}

void write_out(void* out, const Layout& l, const std::vector<float>& r, float alpha, float beta) {
  each(l, [&](std::size_t i, int n, int c, int d, int h, int w) {
    const std::ptrdiff_t at = l.at(n, c, d, h, w);
    const float old = beta == 0.0f ? 0.0f : beta * load(out, l.type, at);
    store(out, l.type, at, alpha * r[i] + old);
  });
}

cudnnStatus_t layout_of(const cudnnTensorStruct* t, const char* name, Layout* out) {
  if (!t || !t->set)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(name) + ": descriptor not set");
  Layout l;
  l.type = t->type;
  const int skip = t->rank == 4 ? 1 : 0;  // [N, C, H, W] has no D
  for (int i = 0, j = 0; i < 5; ++i) {
    if (skip && i == 2) continue;
    l.dim[std::size_t(i)] = t->dim[std::size_t(j)];
    l.stride[std::size_t(i)] = t->stride[std::size_t(j)];
    ++j;
  }
  *out = l;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t layout_of(const cudnnFilterStruct* f, const char* name, Layout* out) {
  if (!f || !f->set)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(name) + ": descriptor not set");
  Layout l;
  l.type = f->type;
  const int skip = f->rank == 4 ? 1 : 0;
  for (int i = 0, j = 0; i < 5; ++i) {
    if (skip && i == 2) continue;
    l.dim[std::size_t(i)] = f->dim[std::size_t(j++)];
  }
  // Packed, fastest last: K, C, (T,) R, S (NCHW) or K, (T,) R, S, C (NHWC).
  const std::array<int, 5> order = f->format == CUDNN_TENSOR_NHWC
                                       ? std::array<int, 5>{0, 2, 3, 4, 1}
                                       : std::array<int, 5>{0, 1, 2, 3, 4};
  std::ptrdiff_t s = 1;
  for (int i = 4; i >= 0; --i) {
    const std::size_t axis = std::size_t(order[std::size_t(i)]);
    l.stride[axis] = s;
    s *= l.dim[axis];
  }
  *out = l;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_pointer(const char* name, const void* p, const Layout& l, bool tensor_ops) {
  const std::size_t bytes = l.span_bytes();
  if (!p) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(name) + " is null");
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address % element_bytes(l.type))
    return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                  std::string(name) + " at " + text(p) + " is not aligned to its element");
  if (tensor_ops && address % 16)
    return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                  std::string(name) + " at " + text(p) +
                      " is not 16-byte aligned, as tensor-core kernels read it");
  if (!is_device_range(p, bytes))
    return refuse(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND,
                  std::string(name) + ": " + std::to_string(bytes) + " bytes from " + text(p) +
                      " do not lie inside one device allocation");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_apart(const char* out_name, const void* out, const Layout& lo,
                          const char* in_name, const void* in, const Layout& li) {
  const auto o = reinterpret_cast<std::uintptr_t>(out), i = reinterpret_cast<std::uintptr_t>(in);
  if (o < i + li.span_bytes() && i < o + lo.span_bytes())
    return refuse(CUDNN_STATUS_BAD_PARAM,
                  std::string(out_name) + " overlaps " + in_name + " (the pass is not in place)");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t conv_shape(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                         const cudnnConvolutionStruct* conv, ConvShape* out) {
  ConvShape s;
  cudnnStatus_t rc = layout_of(x, "x", &s.x);
  if (rc == CUDNN_STATUS_SUCCESS) rc = layout_of(w, "w", &s.w);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!conv || !conv->set) return refuse(CUDNN_STATUS_BAD_PARAM, "convolution descriptor not set");
  if (x->rank != w->rank || conv->spatial != x->rank - 2)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  "x has " + std::to_string(x->rank) + " dimensions, w " + std::to_string(w->rank) +
                      ", the convolution " + std::to_string(conv->spatial) + " spatial ones");
  if (s.x.dim[1] != s.w.dim[1])
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  "x has " + std::to_string(s.x.dim[1]) + " channels, w " +
                      std::to_string(s.w.dim[1]) + " (no groups)");
  if (s.x.type != s.w.type || conv->compute != CUDNN_DATA_FLOAT)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                  "x, w and y share one data type, FLOAT or BFLOAT16, with a FLOAT compute type");
  const int first = 5 - conv->spatial;  // the D, H, W entries the descriptor sets
  for (int i = first; i < 5; ++i) {
    const std::size_t a = std::size_t(i - 2), c = std::size_t(i - first);
    s.pad[a] = conv->pad[c];
    s.stride[a] = conv->stride[c];
    s.dilation[a] = conv->dilation[c];
  }
  s.y.type = s.x.type;
  s.y.dim = {s.x.dim[0], s.w.dim[0], 1, 1, 1};
  for (std::size_t a = 0; a < 3; ++a) {
    const int span = (s.w.dim[a + 2] - 1) * s.dilation[a] + 1;
    const int room = s.x.dim[a + 2] + 2 * s.pad[a] - span;
    if (room < 0)
      return refuse(CUDNN_STATUS_BAD_PARAM, "the filter is larger than the padded input");
    s.y.dim[a + 2] = room / s.stride[a] + 1;
  }
  std::ptrdiff_t stride = 1;
  for (int i = 4; i >= 0; --i) {
    s.y.stride[std::size_t(i)] = stride;
    stride *= s.y.dim[std::size_t(i)];
  }
  s.spatial = conv->spatial;
  s.flip = conv->mode == CUDNN_CONVOLUTION;
  s.math = conv->math;
  *out = s;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t match_output(const ConvShape& s, const cudnnTensorStruct* y, const char* name,
                           Layout* out) {
  const cudnnStatus_t rc = layout_of(y, name, out);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!out->same_shape(s.y) || out->type != s.y.type)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  std::string(name) + " is not the convolution's output (shape or data type)");
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace dptrain_emu::cudnn
