// Implements: the emulated cuDNN's tensor operations and pooling
// (include/cudnn.h), checked at the call (cudnn_emulated.hpp) and computed
// when the handle's stream runs them, from their definitions:
//   cudnnTransformTensor: y = alpha x + beta y over tensors of one shape and
//     data type whose strides may differ (NCHW <-> NHWC);
//   cudnnAddTensor: C = alpha A + beta C, A broadcast along every dimension
//     where it has size 1 (the rest must equal C's);
//   cudnnConvolutionBackwardBias: db[k] = alpha sum_{n,o} dy[n,k,o] + beta db[k],
//     db of shape [1, K, 1, 1(, 1)];
//   cudnnPoolingForward: each output the maximum (NaN wins under
//     CUDNN_PROPAGATE_NAN) or the mean of its window, padding left out of
//     the maximum and, under COUNT_EXCLUDE_PADDING, out of the count;
//   cudnnPoolingBackward: max pooling gives each window's dy to the first
//     position in the window whose x equals the forward's y there (as
//     cuDNN finds the maximum again from x and y: a y that is not the
//     forward's loses the gradient); average pooling spreads dy / count over
//     the window. Where windows overlap, CUDNN_POOLING_MAX adds their shares
//     in an order that changes from call to call (cuDNN lists it as not
//     repeating bit for bit); MAX_DETERMINISTIC and average in one order.
// alpha and beta are read at the call, the out tensor is not read when beta is 0.
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cudnn_emulated.hpp"

namespace {

using namespace dptrain_emu::cudnn;

std::atomic<unsigned> g_pool_calls{0};

struct PoolShape {
  Layout x, y;  // y: the output shape of the pooling (packed)
  std::array<int, 3> window{1, 1, 1}, pad{}, stride{1, 1, 1};
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  bool propagate_nan = false;
  bool max() const { return mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC; }
};

cudnnStatus_t pool_shape(const cudnnPoolingStruct* pool, const cudnnTensorStruct* x,
                         PoolShape* out) {
  PoolShape s;
  const cudnnStatus_t rc = layout_of(x, "x", &s.x);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!pool || !pool->set) return refuse(CUDNN_STATUS_BAD_PARAM, "pooling descriptor not set");
  if (pool->spatial != x->rank - 2)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "pooling and x differ in dimensions");
  if (x->type != CUDNN_DATA_FLOAT)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "the emulated pooling is FLOAT only");
  const int first = 5 - pool->spatial;
  for (int i = first; i < 5; ++i) {
    const std::size_t a = std::size_t(i - 2), c = std::size_t(i - first);
    s.window[a] = pool->window[c];
    s.pad[a] = pool->pad[c];
    s.stride[a] = pool->stride[c];
  }
  s.y = s.x;
  std::ptrdiff_t stride = 1;
  for (int i = 4; i >= 0; --i) {
    if (i >= 2) {
      const std::size_t a = std::size_t(i - 2);
      const int room = s.x.dim[std::size_t(i)] + 2 * s.pad[a] - s.window[a];
      if (room < 0) return refuse(CUDNN_STATUS_BAD_PARAM, "the window is larger than the input");
      s.y.dim[std::size_t(i)] = room / s.stride[a] + 1;
    }
    s.y.stride[std::size_t(i)] = stride;
    stride *= s.y.dim[std::size_t(i)];
  }
  s.mode = pool->mode;
  s.propagate_nan = pool->nan == CUDNN_PROPAGATE_NAN;
  *out = s;
  return CUDNN_STATUS_SUCCESS;
}

// Calls f(x offset) for each input position of the window of output
// (n, c, o), padding left out; returns the count the mean divides by.
template <typename F>
int each_in_window(const PoolShape& s, int n, int c, const std::array<int, 3>& o, F f) {
  int inside = 0;
  for (int t0 = 0; t0 < s.window[0]; ++t0)
    for (int t1 = 0; t1 < s.window[1]; ++t1)
      for (int t2 = 0; t2 < s.window[2]; ++t2) {
        const int i0 = o[0] * s.stride[0] - s.pad[0] + t0, i1 = o[1] * s.stride[1] - s.pad[1] + t1,
                  i2 = o[2] * s.stride[2] - s.pad[2] + t2;
        if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= s.x.dim[2] || i1 >= s.x.dim[3] || i2 >= s.x.dim[4])
          continue;
        ++inside;
        f(s.x.at(n, c, i0, i1, i2));
      }
  return s.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
             ? s.window[0] * s.window[1] * s.window[2]
             : inside;
}

// Calls f(value index, n, c, o) over the outputs, W fastest.
template <typename F>
void each_output(const PoolShape& s, F f) {
  each(s.y, [&](std::size_t i, int n, int c, int d, int h, int w) {
    f(i, n, c, std::array<int, 3>{d, h, w});
  });
}

std::vector<float> pool_forward(const PoolShape& s, const float* x) {
  std::vector<float> r(s.y.values());
  each_output(s, [&](std::size_t i, int n, int c, const std::array<int, 3>& o) {
    float best = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    bool nan = false;
    const int count = each_in_window(s, n, c, o, [&](std::ptrdiff_t at) {
      nan = nan || std::isnan(x[at]);
      best = std::fmax(best, x[at]);
      sum += x[at];
    });
    if (s.max())
      r[i] = nan && s.propagate_nan ? std::numeric_limits<float>::quiet_NaN() : best;
    else
      r[i] = sum / static_cast<float>(count);
  });
  return r;
}

// dx before alpha and beta, in x's value order.
std::vector<float> pool_backward(const PoolShape& s, const Layout& ly, const float* y,
                                 const Layout& ldy, const float* dy, const float* x,
                                 unsigned call) {
  std::vector<std::pair<std::ptrdiff_t, float>> shares;  // (x offset, gradient)
  std::vector<std::ptrdiff_t> window;
  each_output(s, [&](std::size_t, int n, int c, const std::array<int, 3>& o) {
    const float g = dy[ldy.at(n, c, o[0], o[1], o[2])];
    const float want = y[ly.at(n, c, o[0], o[1], o[2])];
    window.clear();
    const int count = each_in_window(s, n, c, o, [&](std::ptrdiff_t at) {
      if (!s.max() || x[at] == want || (std::isnan(want) && std::isnan(x[at])))
        window.push_back(at);
    });
    if (!s.max())
      for (std::ptrdiff_t at : window) shares.emplace_back(at, g / static_cast<float>(count));
    else if (!window.empty())
      shares.emplace_back(window.front(), g);
  });
  std::vector<float> by_offset(s.x.span_bytes() / sizeof(float), 0.0f);
  const bool reorder = s.mode == CUDNN_POOLING_MAX && call % 2;
  for (std::size_t j = 0; j < shares.size(); ++j) {
    const auto& [at, g] = shares[reorder ? shares.size() - 1 - j : j];
    by_offset[std::size_t(at)] += g;
  }
  std::vector<float> dx(s.x.values());
  each(s.x, [&](std::size_t i, int n, int c, int d, int h, int w) {
    dx[i] = by_offset[std::size_t(s.x.at(n, c, d, h, w))];
  });
  return dx;
}

// A tensor descriptor of the same shape as want, FLOAT.
cudnnStatus_t same_shape(const cudnnTensorStruct* t, const char* name, const Layout& want,
                         Layout* out) {
  const cudnnStatus_t rc = layout_of(t, name, out);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!out->same_shape(want) || out->type != CUDNN_DATA_FLOAT)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  std::string(name) + " has not the shape (or type) the operation needs");
  return CUDNN_STATUS_SUCCESS;
}

float scalar(const void* p) { return *static_cast<const float*>(p); }

}  // namespace

cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void* alpha,
                             const cudnnTensorDescriptor_t aDesc, const void* A, const void* beta,
                             const cudnnTensorDescriptor_t cDesc, void* C) {
  Layout la, lc;
  cudnnStatus_t rc = layout_of(aDesc, "A", &la);
  if (rc == CUDNN_STATUS_SUCCESS) rc = layout_of(cDesc, "C", &lc);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  if (aDesc->rank != cDesc->rank || la.type != CUDNN_DATA_FLOAT || lc.type != CUDNN_DATA_FLOAT)
    return refuse(CUDNN_STATUS_BAD_PARAM, "A and C: FLOAT tensors of one rank");
  for (std::size_t i = 0; i < 5; ++i)
    if (la.dim[i] != 1 && la.dim[i] != lc.dim[i])
      return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "A's dimension " + std::to_string(i) + " is neither 1 nor C's");
  rc = check_pointer("A", A, la, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("C", C, lc, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart("C", C, lc, "A", A, la);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  dptrain_emu::enqueue(h->stream, [la, lc, a = static_cast<const float*>(A), C,
                                   alpha = scalar(alpha), beta = scalar(beta)] {
    const auto along = [&](std::size_t axis, int v) { return la.dim[axis] == 1 ? 0 : v; };
    std::vector<float> r(lc.values());
    each(lc, [&](std::size_t i, int n, int c, int d, int h, int w) {
      r[i] = a[la.at(along(0, n), along(1, c), along(2, d), along(3, h), along(4, w))];
    });
    write_out(C, lc, r, alpha, beta);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnTransformTensor(cudnnHandle_t h, const void* alpha,
                                   const cudnnTensorDescriptor_t xDesc, const void* x,
                                   const void* beta, const cudnnTensorDescriptor_t yDesc, void* y) {
  Layout lx, ly;
  cudnnStatus_t rc = layout_of(xDesc, "x", &lx);
  if (rc == CUDNN_STATUS_SUCCESS) rc = layout_of(yDesc, "y", &ly);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  if (xDesc->rank != yDesc->rank || !lx.same_shape(ly) || lx.type != ly.type)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  "x and y: tensors of one shape and data type (their strides may differ)");
  rc = check_pointer("x", x, lx, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("y", y, ly, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart("y", y, ly, "x", x, lx);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  dptrain_emu::enqueue(h->stream, [lx, ly, x, y, alpha = scalar(alpha), beta = scalar(beta)] {
    std::vector<float> r(ly.values());
    each(lx, [&](std::size_t i, int n, int c, int d, int hh, int w) {
      r[i] = load(x, lx.type, lx.at(n, c, d, hh, w));
    });
    write_out(y, ly, r, alpha, beta);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const void* beta, const cudnnTensorDescriptor_t dbDesc,
                                           void* db) {
  Layout ldy, ldb;
  cudnnStatus_t rc = layout_of(dyDesc, "dy", &ldy);
  if (rc == CUDNN_STATUS_SUCCESS) rc = layout_of(dbDesc, "db", &ldb);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  const std::array<int, 5> want{1, ldy.dim[1], 1, 1, 1};
  if (ldb.dim != want || dyDesc->rank != dbDesc->rank || ldy.type != CUDNN_DATA_FLOAT ||
      ldb.type != CUDNN_DATA_FLOAT)
    return refuse(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  "db is not [1, K, 1, 1(, 1)] of dy, FLOAT");
  rc = check_pointer("dy", dy, ldy, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("db", db, ldb, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart("db", db, ldb, "dy", dy, ldy);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  dptrain_emu::enqueue(h->stream, [ldy, ldb, g = static_cast<const float*>(dy), db,
                                   alpha = scalar(alpha), beta = scalar(beta)] {
    std::vector<float> r(std::size_t(ldy.dim[1]), 0.0f);
    each(ldy, [&](std::size_t, int n, int k, int d, int h, int w) {
      r[std::size_t(k)] += g[ldy.at(n, k, d, h, w)];
    });
    write_out(db, ldb, r, alpha, beta);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPoolingNdForwardOutputDim(const cudnnPoolingDescriptor_t pool,
                                                const cudnnTensorDescriptor_t x, int rank,
                                                int out[]) {
  PoolShape s;
  const cudnnStatus_t rc = pool_shape(pool, x, &s);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (rank != x->rank) return refuse(CUDNN_STATUS_BAD_PARAM, "output dimensions: not x's rank");
  for (int i = 0, j = 0; i < 5; ++i)
    if (!(rank == 4 && i == 2)) out[j++] = s.y.dim[std::size_t(i)];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pool,
                                  const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                  const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yDesc, void* y) {
  PoolShape s;
  Layout ly;
  cudnnStatus_t rc = pool_shape(pool, xDesc, &s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = same_shape(yDesc, "y", s.y, &ly);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  rc = check_pointer("x", x, s.x, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("y", y, ly, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart("y", y, ly, "x", x, s.x);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  dptrain_emu::enqueue(
      h->stream, [s, ly, x = static_cast<const float*>(x), y, alpha = scalar(alpha),
                  beta = scalar(beta)] { write_out(y, ly, pool_forward(s, x), alpha, beta); });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pool,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc,
                                   const void* y, const cudnnTensorDescriptor_t dyDesc,
                                   const void* dy, const cudnnTensorDescriptor_t xDesc,
                                   const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  PoolShape s;
  Layout ly, ldy, ldx;
  cudnnStatus_t rc = pool_shape(pool, xDesc, &s);
  if (rc == CUDNN_STATUS_SUCCESS) rc = same_shape(yDesc, "y", s.y, &ly);
  if (rc == CUDNN_STATUS_SUCCESS) rc = same_shape(dyDesc, "dy", s.y, &ldy);
  if (rc == CUDNN_STATUS_SUCCESS) rc = same_shape(dxDesc, "dx", s.x, &ldx);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  if (!h) return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no handle");
  rc = check_pointer("y", y, ly, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("dy", dy, ldy, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("x", x, s.x, false);
  if (rc == CUDNN_STATUS_SUCCESS) rc = check_pointer("dx", dx, ldx, false);
  for (const auto& [name, p, l] :
       {std::tuple{"y", y, ly}, std::tuple{"dy", dy, ldy}, std::tuple{"x", x, s.x}})
    if (rc == CUDNN_STATUS_SUCCESS) rc = check_apart("dx", dx, ldx, name, p, l);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  dptrain_emu::enqueue(h->stream,
                       [s, ly, ldy, ldx, y = static_cast<const float*>(y),
                        dy = static_cast<const float*>(dy), x = static_cast<const float*>(x), dx,
                        alpha = scalar(alpha), beta = scalar(beta), call = g_pool_calls++] {
                         write_out(dx, ldx, pool_backward(s, ly, y, ldy, dy, x, call), alpha, beta);
                       });
  return CUDNN_STATUS_SUCCESS;
}
