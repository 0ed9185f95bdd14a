// Implements: the emulated cuDNN's convolution passes (include/cudnn.h):
// cudnnConvolutionForward, cudnnConvolutionBackwardData and
// cudnnConvolutionBackwardFilter, checked at the call and computed when the
// handle's stream runs them, from their definitions (cudnn_emulated.hpp):
//   forward:         y[n,k,o] = sum_{c,t} x[n,c,o*s - p + t*d] w[k,c,t]
//   backward data:   dx[n,c,i] = sum_{k,t: i = o*s - p + t*d} dy[n,k,o] w[k,c,t]
//   backward filter: dw[k,c,t] = sum_{n,o} x[n,c,o*s - p + t*d] dy[n,k,o]
// over o, i, t in D, H, W, with t mirrored under CUDNN_CONVOLUTION.
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cublas_v2.h"  // dptrain_emu::to_tf32
#include "cudnn_emulated.hpp"

namespace {

using namespace dptrain_emu::cudnn;

// Every call's number: where a non-deterministic algorithm starts its sum.
std::atomic<unsigned> g_calls{0};

// One pass as the stream runs it, copied at the call.
struct PassWork {
  Pass pass;
  ConvShape s;
  Algorithm algo;
  Layout a, b, out;  // the two inputs and the output, in the argument order of the pass
  const void* pa;
  const void* pb;
  void* pout;
  void* workspace;
  float alpha, beta;
  unsigned call;
};

float value(const PassWork& p, const void* data, const Layout& l, std::ptrdiff_t at) {
  const float v = load(data, l.type, at);
  return p.algo.math == CUDNN_TENSOR_OP_MATH && l.type == CUDNN_DATA_FLOAT ? dptrain_emu::to_tf32(v)
                                                                           : v;
}

// The filter tap that input offset t of axis a reads.
int tap(const ConvShape& s, std::size_t a, int t) { return s.flip ? s.w.dim[a + 2] - 1 - t : t; }

// The input position o*s - p + t*d of axis a, or -1 outside the input.
int input_at(const ConvShape& s, std::size_t a, int o, int t) {
  const int i = o * s.stride[a] - s.pad[a] + t * s.dilation[a];
  return i >= 0 && i < s.x.dim[a + 2] ? i : -1;
}

// The output position o with o*s - p + t*d = i on axis a, or -1.
int output_at(const ConvShape& s, std::size_t a, int i, int t) {
  const int q = i + s.pad[a] - t * s.dilation[a];
  if (q < 0 || q % s.stride[a]) return -1;
  const int o = q / s.stride[a];
  return o < s.y.dim[a + 2] ? o : -1;
}

// Calls f(t0, t1, t2) over the filter taps.
template <typename F>
void each_tap(const ConvShape& s, F f) {
  for (int t0 = 0; t0 < s.w.dim[2]; ++t0)
    for (int t1 = 0; t1 < s.w.dim[3]; ++t1)
      for (int t2 = 0; t2 < s.w.dim[4]; ++t2) f(t0, t1, t2);
}

std::vector<float> forward(const PassWork& p) {  // a = x, b = w
  const ConvShape& s = p.s;
  std::vector<float> r(p.out.values());
  each(p.out, [&](std::size_t i, int n, int k, int od, int oh, int ow) {
    float sum = 0.0f;
    for (int c = 0; c < s.x.dim[1]; ++c)
      each_tap(s, [&](int t0, int t1, int t2) {
        const int id = input_at(s, 0, od, t0), ih = input_at(s, 1, oh, t1),
                  iw = input_at(s, 2, ow, t2);
        if (id < 0 || ih < 0 || iw < 0) return;
        sum += value(p, p.pa, p.a, p.a.at(n, c, id, ih, iw)) *
               value(p, p.pb, p.b, p.b.at(k, c, tap(s, 0, t0), tap(s, 1, t1), tap(s, 2, t2)));
      });
    r[i] = sum;
  });
  return r;
}

std::vector<float> backward_data(const PassWork& p) {  // a = w, b = dy
  const ConvShape& s = p.s;
  const int channels = s.w.dim[0];
  const int start = p.algo.determinism == CUDNN_DETERMINISTIC ? 0 : int(p.call % channels);
  std::vector<float> r(p.out.values());
  each(p.out, [&](std::size_t i, int n, int c, int id, int ih, int iw) {
    float sum = 0.0f;
    for (int j = 0; j < channels; ++j) {
      const int k = (start + j) % channels;
      each_tap(s, [&](int t0, int t1, int t2) {
        const int od = output_at(s, 0, id, t0), oh = output_at(s, 1, ih, t1),
                  ow = output_at(s, 2, iw, t2);
        if (od < 0 || oh < 0 || ow < 0) return;
        sum += value(p, p.pb, p.b, p.b.at(n, k, od, oh, ow)) *
               value(p, p.pa, p.a, p.a.at(k, c, tap(s, 0, t0), tap(s, 1, t1), tap(s, 2, t2)));
      });
    }
    r[i] = sum;
  });
  return r;
}

std::vector<float> backward_filter(const PassWork& p) {  // a = x, b = dy
  const ConvShape& s = p.s;
  const int rows = s.x.dim[0];
  const int start = p.algo.determinism == CUDNN_DETERMINISTIC ? 0 : int(p.call % rows);
  std::vector<float> r(p.out.values());
  each(p.out, [&](std::size_t i, int k, int c, int w0, int w1, int w2) {
    const int t0 = tap(s, 0, w0), t1 = tap(s, 1, w1), t2 = tap(s, 2, w2);
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j) {
      const int n = (start + j) % rows;
      for (int od = 0; od < s.y.dim[2]; ++od)
        for (int oh = 0; oh < s.y.dim[3]; ++oh)
          for (int ow = 0; ow < s.y.dim[4]; ++ow) {
            const int id = input_at(s, 0, od, t0), ih = input_at(s, 1, oh, t1),
                      iw = input_at(s, 2, ow, t2);
            if (id < 0 || ih < 0 || iw < 0) continue;
            sum += value(p, p.pa, p.a, p.a.at(n, c, id, ih, iw)) *
                   value(p, p.pb, p.b, p.b.at(n, k, od, oh, ow));
          }
    }
    r[i] = sum;
  });
  return r;
}

void run(const PassWork& p) {
  std::vector<float> r = p.pass == Pass::kForward        ? forward(p)
                         : p.pass == Pass::kBackwardData ? backward_data(p)
                                                         : backward_filter(p);
  if (transforms(p.pass, p.algo.algo)) {  // an error bounded by the norm
    float largest = 0.0f;
    for (float v : r) largest = std::fmax(largest, std::fabs(v));
    for (std::size_t i = 0; i < r.size(); ++i)
      r[i] += (((i * 2654435761u) >> 7) & 1 ? 1.0f : -1.0f) * std::ldexp(largest, -14);
  }
  if (p.algo.memory) std::memset(p.workspace, 0xff, p.algo.memory);
  write_out(p.pout, p.out, r, p.alpha, p.beta);
}

// The checks of a pass's call (cudnn_emulated.hpp) and its queueing.
cudnnStatus_t submit(cudnnHandle_t h, PassWork p, std::size_t workspace_bytes, const char* names[3],
                     const void* alpha, const void* beta) {
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  cudnnStatus_t rc = runnable(p.pass, p.s, p.algo.algo, &p.algo);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (workspace_bytes < p.algo.memory)
    return refuse(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
                  "algorithm " + std::to_string(p.algo.algo) + " needs a workspace of " +
                      std::to_string(p.algo.memory) + " bytes, given " +
                      std::to_string(workspace_bytes));
  if (p.algo.memory && !dptrain_emu::is_device_range(p.workspace, p.algo.memory))
    return refuse(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND, "the workspace is not device memory");
  const bool tensor_ops = p.algo.math == CUDNN_TENSOR_OP_MATH;
  rc = check_pointer(names[0], p.pa, p.a, tensor_ops);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer(names[1], p.pb, p.b, tensor_ops);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer(names[2], p.pout, p.out, tensor_ops);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart(names[2], p.pout, p.out, names[0], p.pa, p.a);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart(names[2], p.pout, p.out, names[1], p.pb, p.b);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  p.alpha = *static_cast<const float*>(alpha);
  p.beta = *static_cast<const float*>(beta);
  p.call = g_calls++;
  dptrain_emu::enqueue(h->stream, [p] { run(p); });
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                      std::size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  PassWork p{};
  p.pass = Pass::kForward;
  cudnnStatus_t rc = conv_shape(xDesc, wDesc, conv, &p.s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = match_output(p.s, yDesc, "y", &p.out);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  p.algo.algo = algo;
  p.a = p.s.x, p.b = p.s.w, p.pa = x, p.pb = w, p.pout = y, p.workspace = workSpace;
  static const char* names[3] = {"x", "w", "y"};
  return submit(h, p, workSpaceSizeInBytes, names, alpha, beta);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           std::size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  PassWork p{};
  p.pass = Pass::kBackwardData;
  cudnnStatus_t rc = conv_shape(dxDesc, wDesc, conv, &p.s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = match_output(p.s, dyDesc, "dy", &p.b);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  p.algo.algo = algo;
  p.a = p.s.w, p.out = p.s.x, p.pa = w, p.pb = dy, p.pout = dx, p.workspace = workSpace;
  static const char* names[3] = {"w", "dy", "dx"};
  return submit(h, p, workSpaceSizeInBytes, names, alpha, beta);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             std::size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  PassWork p{};
  p.pass = Pass::kBackwardFilter;
  cudnnStatus_t rc = conv_shape(xDesc, dwDesc, conv, &p.s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = match_output(p.s, dyDesc, "dy", &p.b);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  p.algo.algo = algo;
  p.a = p.s.x, p.out = p.s.w, p.pa = x, p.pb = dy, p.pout = dw, p.workspace = workSpace;
  static const char* names[3] = {"x", "dy", "dw"};
  return submit(h, p, workSpaceSizeInBytes, names, alpha, beta);
}
