// Implements: tests of the emulated cuDNN itself (include/cudnn.h,
// cudnn_emulated.hpp), so that what the cuDNN plan tests pass on means
// something: the forward pass is the definition on a case worked by hand
// (padding, stride, cross-correlation against convolution, alpha and
// beta); the two backward passes are its adjoints on a random 3-D case
// with stride, padding and dilation; the refusals a real cuDNN gives (a
// wrong output shape, a short workspace, an algorithm it lacks, a host
// pointer) come with a message naming the operand; a non-deterministic
// algorithm does not repeat bit for bit; max pooling's backward follows the
// forward's y, as cuDNN's does; channels-last (NHWC) tensors and filters
// hold their elements where cuDNN puts them and compute what NCHW does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cudnn.h"

namespace {

struct Device {
  explicit Device(const std::vector<float>& v) : n(v.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  std::vector<float> host() const {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  float* p = nullptr;
  std::size_t n;
};

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

std::vector<int> packed_strides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i-- > 0;) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::size_t count(const std::vector<int>& dims) {
  std::size_t n = 1;
  for (int d : dims) n *= std::size_t(d);
  return n;
}

// The descriptors of one convolution.
struct Conv {
  Conv(const std::vector<int>& x_dims, const std::vector<int>& w_dims, std::vector<int> pad,
       std::vector<int> stride, std::vector<int> dilation,
       cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION) {
    cudnnCreate(&h);
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&conv);
    const int rank = int(x_dims.size());
    EXPECT_EQ(cudnnSetTensorNdDescriptor(x, CUDNN_DATA_FLOAT, rank, x_dims.data(),
                                         packed_strides(x_dims).data()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(
        cudnnSetFilterNdDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, rank, w_dims.data()),
        CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionNdDescriptor(conv, rank - 2, pad.data(), stride.data(),
                                              dilation.data(), mode, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
    y_dims.resize(x_dims.size());
    EXPECT_EQ(cudnnGetConvolutionNdForwardOutputDim(conv, x, w, rank, y_dims.data()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensorNdDescriptor(y, CUDNN_DATA_FLOAT, rank, y_dims.data(),
                                         packed_strides(y_dims).data()),
              CUDNN_STATUS_SUCCESS);
  }
  ~Conv() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroy(h);
  }
  cudnnHandle_t h = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<int> y_dims;
};

constexpr float kOne = 1.0f, kZero = 0.0f;
const auto kImplicit = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;

std::string last_error() {
  char text[512];
  cudnnGetLastErrorString(text, sizeof text);
  return text;
}

TEST(EmulatedCudnn, ForwardIsTheDefinitionOnACaseWorkedByHand) {
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, w{1, 0, 0, -1};
  Device dx(x), dw(w);
  {  // y[i][j] = x[i][j] - x[i+1][j+1] = -4; convolution mirrors the filter: +4
    for (auto [mode, want] :
         {std::pair{CUDNN_CROSS_CORRELATION, -4.0f}, {CUDNN_CONVOLUTION, 4.0f}}) {
      Conv c({1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0}, {1, 1}, {1, 1}, mode);
      ASSERT_EQ(c.y_dims, (std::vector<int>{1, 1, 2, 2}));
      Device dy(std::vector<float>(4, NAN));  // beta 0: y is not read
      const float two = 2.0f;
      ASSERT_EQ(cudnnConvolutionForward(c.h, &two, c.x, dx.p, c.w, dw.p, c.conv, kImplicit, nullptr,
                                        0, &kZero, c.y, dy.p),
                CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(dy.host(), std::vector<float>(4, 2 * want));
      ASSERT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, dx.p, c.w, dw.p, c.conv, kImplicit,
                                        nullptr, 0, &kOne, c.y, dy.p),
                CUDNN_STATUS_SUCCESS);  // beta 1: y += the result
      EXPECT_EQ(dy.host(), std::vector<float>(4, 3 * want));
    }
  }
  // Padding 1, stride 2: windows at (-1,-1), (-1,1), (1,-1), (1,1), zero outside.
  Conv c({1, 1, 3, 3}, {1, 1, 2, 2}, {1, 1}, {2, 2}, {1, 1});
  ASSERT_EQ(c.y_dims, (std::vector<int>{1, 1, 2, 2}));
  Device dy(std::vector<float>(4, 0.0f));
  ASSERT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, dx.p, c.w, dw.p, c.conv, kImplicit, nullptr, 0,
                                    &kZero, c.y, dy.p),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dy.host(), (std::vector<float>{-1, -3, -7, -4}));
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(EmulatedCudnn, TheBackwardPassesAreTheForwardsAdjoints) {
  // <conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)>
  Conv c({2, 3, 5, 6, 7}, {4, 3, 3, 2, 3}, {1, 0, 2}, {2, 1, 2}, {1, 2, 1});
  const std::vector<float> x = random_values(count({2, 3, 5, 6, 7}), 1);
  const std::vector<float> w = random_values(count({4, 3, 3, 2, 3}), 2);
  const std::vector<float> g = random_values(count(c.y_dims), 3);
  Device dx(x), dw(w), dg(g), y(std::vector<float>(g.size())), gx(x), gw(w);
  ASSERT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, dx.p, c.w, dw.p, c.conv, kImplicit, nullptr, 0,
                                    &kZero, c.y, y.p),
            CUDNN_STATUS_SUCCESS);
  std::size_t ws = 0;
  ASSERT_EQ(cudnnGetConvolutionBackwardDataWorkspaceSize(c.h, c.w, c.y, c.conv, c.x,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &ws),
            CUDNN_STATUS_SUCCESS);
  Device data_workspace(std::vector<float>(ws / sizeof(float) + 1));
  ASSERT_EQ(cudnnConvolutionBackwardData(c.h, &kOne, c.w, dw.p, c.y, dg.p, c.conv,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, data_workspace.p, ws,
                                         &kZero, c.x, gx.p),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                c.h, c.x, c.y, c.conv, c.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &ws),
            CUDNN_STATUS_SUCCESS);
  Device workspace(std::vector<float>(ws / sizeof(float) + 1));
  ASSERT_EQ(cudnnConvolutionBackwardFilter(c.h, &kOne, c.x, dx.p, c.y, dg.p, c.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, workspace.p, ws,
                                           &kZero, c.w, gw.p),
            CUDNN_STATUS_SUCCESS);
  const double forward = dot(y.host(), g), data = dot(x, gx.host()), filter = dot(w, gw.host());
  EXPECT_NE(forward, 0.0);
  EXPECT_NEAR(data, forward, 1e-4 * std::fabs(forward));
  EXPECT_NEAR(filter, forward, 1e-4 * std::fabs(forward));
}

TEST(EmulatedCudnn, RefusesWhatCudnnWouldAndSaysWhy) {
  Conv c({2, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1});
  Device x(std::vector<float>(2 * 3 * 36)), w(std::vector<float>(4 * 27)),
      y(std::vector<float>(2 * 4 * 36));
  cudnnTensorDescriptor_t wrong;
  cudnnCreateTensorDescriptor(&wrong);
  const std::vector<int> dims{2, 4, 5, 6};
  cudnnSetTensorNdDescriptor(wrong, CUDNN_DATA_FLOAT, 4, dims.data(), packed_strides(dims).data());
  EXPECT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, x.p, c.w, w.p, c.conv, kImplicit, nullptr, 0,
                                    &kZero, wrong, y.p),
            CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
  EXPECT_NE(last_error().find("y is not the convolution's output"), std::string::npos);
  cudnnDestroyTensorDescriptor(wrong);

  const auto precomp = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  std::size_t ws = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardWorkspaceSize(c.h, c.x, c.w, c.conv, c.y, precomp, &ws),
            CUDNN_STATUS_SUCCESS);
  ASSERT_GT(ws, 0u);
  EXPECT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, x.p, c.w, w.p, c.conv, precomp, x.p, ws - 1,
                                    &kZero, c.y, y.p),
            CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
  EXPECT_NE(last_error().find("needs a workspace of " + std::to_string(ws)), std::string::npos);
  EXPECT_EQ(
      cudnnConvolutionForward(c.h, &kOne, c.x, x.p, c.w, w.p, c.conv,
                              CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, nullptr, 0, &kZero, c.y, y.p),
      CUDNN_STATUS_NOT_SUPPORTED);
  std::vector<float> host(2 * 3 * 36);
  EXPECT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, host.data(), c.w, w.p, c.conv, kImplicit,
                                    nullptr, 0, &kZero, c.y, y.p),
            CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND);
  EXPECT_NE(last_error().find("x: 864 bytes"), std::string::npos);
  // Under tensor-op math the filter must be 16-byte aligned.
  ASSERT_EQ(cudnnSetConvolutionMathType(c.conv, CUDNN_TENSOR_OP_MATH), CUDNN_STATUS_SUCCESS);
  Device shifted(std::vector<float>(4 * 27 + 1));
  EXPECT_EQ(cudnnConvolutionForward(c.h, &kOne, c.x, x.p, c.w, shifted.p + 1, c.conv, kImplicit,
                                    nullptr, 0, &kZero, c.y, y.p),
            CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  EXPECT_NE(last_error().find("w at"), std::string::npos);
}

TEST(EmulatedCudnn, ANonDeterministicAlgorithmDoesNotRepeatBitwise) {
  Conv c({4, 3, 7, 7}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1});
  Device x(random_values(4 * 3 * 49, 4)), g(random_values(4 * 5 * 49, 5));
  auto filter_gradient = [&](cudnnConvolutionBwdFilterAlgo_t algo) {
    Device dw(std::vector<float>(5 * 27));
    std::size_t ws = 0;
    EXPECT_EQ(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.h, c.x, c.y, c.conv, c.w, algo, &ws),
              CUDNN_STATUS_SUCCESS);
    Device workspace(std::vector<float>(ws / sizeof(float) + 1));
    EXPECT_EQ(cudnnConvolutionBackwardFilter(c.h, &kOne, c.x, x.p, c.y, g.p, c.conv, algo,
                                             workspace.p, ws, &kZero, c.w, dw.p),
              CUDNN_STATUS_SUCCESS);
    return dw.host();
  };
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  const auto d1 = filter_gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  EXPECT_TRUE(same_bits(d1, filter_gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1)));
  const auto d0 = filter_gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  EXPECT_FALSE(same_bits(d0, filter_gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0)));
  for (std::size_t i = 0; i < d0.size(); ++i) EXPECT_NEAR(d0[i], d1[i], 1e-4) << i;
}

TEST(EmulatedCudnn, MaxPoolingBackwardFollowsTheForwardsY) {
  cudnnHandle_t h;
  cudnnPoolingDescriptor_t pool;
  cudnnTensorDescriptor_t tx, ty;
  cudnnCreate(&h);
  cudnnCreatePoolingDescriptor(&pool);
  cudnnCreateTensorDescriptor(&tx);
  cudnnCreateTensorDescriptor(&ty);
  const std::vector<int> xd{1, 1, 2, 2}, yd{1, 1, 1, 1}, window{2, 2}, pad{0, 0}, stride{2, 2};
  cudnnSetTensorNdDescriptor(tx, CUDNN_DATA_FLOAT, 4, xd.data(), packed_strides(xd).data());
  cudnnSetTensorNdDescriptor(ty, CUDNN_DATA_FLOAT, 4, yd.data(), packed_strides(yd).data());
  Device x({1, 3, 2, 0}), y({NAN}), dy({1}), dx(std::vector<float>(4, NAN));
  for (auto [mode, want] :
       {std::pair{CUDNN_POOLING_MAX_DETERMINISTIC, std::vector<float>{0, 1, 0, 0}},
        {CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, std::vector<float>(4, 0.25f)}}) {
    ASSERT_EQ(cudnnSetPoolingNdDescriptor(pool, mode, CUDNN_PROPAGATE_NAN, 2, window.data(),
                                          pad.data(), stride.data()),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnPoolingForward(h, pool, &kOne, tx, x.p, &kZero, ty, y.p), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(y.host()[0], mode == CUDNN_POOLING_MAX_DETERMINISTIC ? 3.0f : 1.5f);
    ASSERT_EQ(cudnnPoolingBackward(h, pool, &kOne, ty, y.p, ty, dy.p, tx, x.p, &kZero, tx, dx.p),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(dx.host(), want);
  }
  // A y that is not the forward's: max pooling finds the maximum where x equals it.
  cudnnSetPoolingNdDescriptor(pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 2,
                              window.data(), pad.data(), stride.data());
  Device other({2});
  ASSERT_EQ(cudnnPoolingBackward(h, pool, &kOne, ty, other.p, ty, dy.p, tx, x.p, &kZero, tx, dx.p),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dx.host(), (std::vector<float>{0, 0, 1, 0}));
  cudnnDestroyTensorDescriptor(ty);
  cudnnDestroyTensorDescriptor(tx);
  cudnnDestroyPoolingDescriptor(pool);
  cudnnDestroy(h);
}

// Channels-last, as dptrain_conv_layout uses it: cudnnTransformTensor
// puts element (n, c, h, w) of an NHWC tensor at ((n H + h) W + w) C + c,
// and a forward pass on NHWC tensors and a KRSC filter gives, converted
// back, the NCHW pass's output (same sums in the same order: bit for bit).
TEST(EmulatedCudnn, ChannelsLastHoldsCudnnsOrderAndComputesWhatNchwDoes) {
  const int N = 2, C = 3, H = 5, W = 4, K = 4, R = 3;
  const std::vector<float> x = random_values(std::size_t(N) * C * H * W, 5);
  const std::vector<float> w = random_values(std::size_t(K) * C * R * R, 6);
  Conv nchw({N, C, H, W}, {K, C, R, R}, {1, 1}, {1, 1}, {1, 1});
  ASSERT_EQ(nchw.y_dims, (std::vector<int>{N, K, H, W}));
  Device dx(x), dw(w), dy(std::vector<float>(std::size_t(N) * K * H * W, 0.0f));
  ASSERT_EQ(cudnnConvolutionForward(nchw.h, &kOne, nchw.x, dx.p, nchw.w, dw.p, nchw.conv,
                                    kImplicit, nullptr, 0, &kZero, nchw.y, dy.p),
            CUDNN_STATUS_SUCCESS)
      << last_error();

  cudnnTensorDescriptor_t x_nhwc, y_nhwc, w_nchw, w_nhwc;
  cudnnFilterDescriptor_t filter_nhwc;
  for (auto* t : {&x_nhwc, &y_nhwc, &w_nchw, &w_nhwc}) cudnnCreateTensorDescriptor(t);
  cudnnCreateFilterDescriptor(&filter_nhwc);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(x_nhwc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, C, H, W),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(y_nhwc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, K, H, W),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(w_nchw, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, K, C, R, R),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(w_nhwc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, K, C, R, R),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(filter_nhwc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, K, C, R, R),
            CUDNN_STATUS_SUCCESS);
  Device dx_nhwc(std::vector<float>(x.size(), NAN)), dw_nhwc(std::vector<float>(w.size(), NAN));
  Device dy_nhwc(std::vector<float>(dy.n, NAN)), dy_back(std::vector<float>(dy.n, NAN));
  ASSERT_EQ(cudnnTransformTensor(nchw.h, &kOne, nchw.x, dx.p, &kZero, x_nhwc, dx_nhwc.p),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnTransformTensor(nchw.h, &kOne, w_nchw, dw.p, &kZero, w_nhwc, dw_nhwc.p),
            CUDNN_STATUS_SUCCESS);
  const std::vector<float> x_cl = dx_nhwc.host();
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int h = 0; h < H; ++h)
        for (int v = 0; v < W; ++v)
          ASSERT_EQ(x_cl[std::size_t(((n * H + h) * W + v) * C + c)],
                    x[std::size_t(((n * C + c) * H + h) * W + v)]);
  ASSERT_EQ(cudnnConvolutionForward(nchw.h, &kOne, x_nhwc, dx_nhwc.p, filter_nhwc, dw_nhwc.p,
                                    nchw.conv, kImplicit, nullptr, 0, &kZero, y_nhwc, dy_nhwc.p),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  ASSERT_EQ(cudnnTransformTensor(nchw.h, &kOne, y_nhwc, dy_nhwc.p, &kZero, nchw.y, dy_back.p),
            CUDNN_STATUS_SUCCESS);
  const std::vector<float> want = dy.host(), got = dy_back.host();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "at " << i;
  // A transform between tensors of different shapes is refused.
  EXPECT_EQ(cudnnTransformTensor(nchw.h, &kOne, nchw.x, dx.p, &kZero, y_nhwc, dy_nhwc.p),
            CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
  cudnnDestroyFilterDescriptor(filter_nhwc);
  for (auto t : {x_nhwc, y_nhwc, w_nchw, w_nhwc}) cudnnDestroyTensorDescriptor(t);
}

}  // namespace
