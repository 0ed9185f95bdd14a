// Implements: the CUDA pooling plan (cudnn_plans.hpp) on cudnnPoolingForward
// / cudnnPoolingBackward over packed NCHW / NCDHW fp32 tensors, no padding
// (cuDNN floors (in - k) / s + 1 as the layer does), one pair of tensor
// descriptors per row count, made the first time that count is seen. Max
// pooling is CUDNN_POOLING_MAX_DETERMINISTIC: plain CUDNN_POOLING_MAX is
// on cuDNN's list of routines whose backward does not repeat bit for bit.
// Average pooling excludes padding, of which there is none, so it divides
// by the window size as torch does. NaN propagates (the step's non-finite
// check must see it). Pooling stays fp32 under every --precision.
//
// cuDNN's backward reads the forward's x and y (it finds each window's
// maximum again instead of keeping a workspace), and PoolPlan::backward
// passes neither, so the plan keeps their addresses from the forward with
// the same rows. The model keeps both unchanged until the backward: every
// layer's input and output are activation buffers of their own.
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cudnn/cudnn_plans.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cuda {
namespace {

constexpr float kOne = 1.0f, kZero = 0.0f;

struct RowDescriptors {
  TensorDescriptor x, y;
};

class CudnnPoolPlan final : public PoolPlan {
 public:
  CudnnPoolPlan(CudnnContext& context, const PoolGeometry& g)
      : c_(context), g_(g), by_rows_(static_cast<std::size_t>(std::max(g.max_rows, 0)) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "pooling is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a pooling plan needs max_rows >= 1");
    const std::array<int, 3> no_padding{0, 0, 0};
    const cudnnPoolingMode_t mode = g.kind == PoolKind::kMax
                                        ? CUDNN_POOLING_MAX_DETERMINISTIC
                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    pool_ = PoolingDescriptor::create();
    DPT_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(pool_.get(), mode, CUDNN_PROPAGATE_NAN, g.dims,
                                                g.window.data(), no_padding.data(),
                                                g.stride.data()));
    ++created_;
    descriptors(g.max_rows);
  }

  void forward(const float* x, float* y, int rows) override {
    const RowDescriptors& d = descriptors(rows);
    DPT_CUDNN_CHECK(
        cudnnPoolingForward(c_.handle(), pool_.get(), &kOne, d.x.get(), x, &kZero, d.y.get(), y));
    forward_x_ = x;
    forward_y_ = y;
    forward_rows_ = rows;
  }

  void backward(const float* dy, float* dx, int rows) override {
    DPT_REQUIRE(rows == forward_rows_, ExitCode::kOther,
                "pooling backward over " + std::to_string(rows) +
                    " rows must follow a forward over as many (last: " +
                    std::to_string(forward_rows_) + ")");
    const RowDescriptors& d = descriptors(rows);
    DPT_CUDNN_CHECK(cudnnPoolingBackward(c_.handle(), pool_.get(), &kOne, d.y.get(), forward_y_,
                                         d.y.get(), dy, d.x.get(), forward_x_, &kZero, d.x.get(),
                                         dx));
  }

  std::size_t objects_created() const override { return created_; }

 private:
  const RowDescriptors& descriptors(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "pooling over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) {
      slot = std::make_unique<RowDescriptors>();
      slot->x = activation_descriptor(rows, g_.channels, g_.dims, g_.input, CUDNN_DATA_FLOAT);
      slot->y = activation_descriptor(rows, g_.channels, g_.dims, g_.output, CUDNN_DATA_FLOAT);
      created_ += 2;
      check_output(slot->x.get(), rows);
    }
    return *slot;
  }

  // cuDNN floors (in - window) / stride + 1 as the layer does; a mismatch
  // would be a bug here, caught before anything runs.
  void check_output(cudnnTensorDescriptor_t x, int rows) const {
    std::array<int, 5> got{};
    DPT_CUDNN_CHECK(cudnnGetPoolingNdForwardOutputDim(pool_.get(), x, g_.dims + 2, got.data()));
    const std::array<int, 5> want{rows, g_.channels, g_.output[0], g_.output[1], g_.output[2]};
    for (int i = 0; i < g_.dims + 2; ++i)
      DPT_REQUIRE(got[std::size_t(i)] == want[std::size_t(i)], ExitCode::kOther,
                  "cuDNN's pooling output shape differs from the layer's");
  }

  CudnnContext& c_;
  PoolGeometry g_;
  std::vector<std::unique_ptr<RowDescriptors>> by_rows_;  // [rows], made on first use
  PoolingDescriptor pool_;
  const float* forward_x_ = nullptr;
  const float* forward_y_ = nullptr;
  int forward_rows_ = 0;
  std::size_t created_ = 0;
};

}  // namespace

std::unique_ptr<PoolPlan> make_cudnn_pool_plan(CudnnContext& context, const PoolGeometry& g) {
  return std::make_unique<CudnnPoolPlan>(context, g);
}

}  // namespace dptrain::cuda
