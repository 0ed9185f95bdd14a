// Implements: the spatial kernel family of a Backend (docs/design.md section 1):
// convolution and pooling over [N, C, H, W] images and [N, C, D, H, W]
// volumes. A layer asks for a plan of its geometry once, at
// Layer::allocate, and the plan runs its passes for any row count up to
// max_rows. Whatever a plan needs per row count (the CPU backend's oneDNN
// primitives) is made the first time that count is seen and reused after,
// so a warmed-up step creates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernel_family.hpp"

namespace dptrain {

// Spatial extents in the order the tensors store them: {H, W} for images
// (dims == 2), {D, H, W} for volumes (dims == 3); entries past dims unused.
using SpatialExtent = std::array<int, 3>;

struct ConvGeometry {
  int dims = 2;  // 2 or 3
  int in_channels = 1, out_channels = 1;
  SpatialExtent input{}, output{};
  SpatialExtent kernel{}, stride{}, padding{};  // zero padding, the same on both sides
  int max_rows = 1;
};

enum class PoolKind { kMax, kAvg };

// No padding; windows that would run past the input are dropped (floor).
struct PoolGeometry {
  PoolKind kind = PoolKind::kMax;
  int dims = 2;
  int channels = 1;
  SpatialExtent input{}, output{};
  SpatialExtent window{}, stride{};
  int max_rows = 1;
};

// Tensors are dense row-major in the device memory of the owning backend:
// activations [rows, C, (D,) H, W], the weight [out, in, k, k(, k)] as
// torch.nn.Conv2d/Conv3d store it, the bias [out]. 1 <= rows <= max_rows.
// In a step's order — forward, backward_weights, backward_data, as a layer
// runs them — a pass right after another over the same input (address and
// rows: x after forward, dy after backward_weights) may reuse what that
// pass made of it (the CPU plan's conversion to its blocked layout), so
// that input must not change in between.
// A pass of a convolution, and the math a library's algorithm for it runs
// with (what cuDNN reports as the chosen algorithm's mathType): kTensorOp
// lets tensor cores round fp32 operands to TF32, kFma keeps them fp32,
// kDefault leaves it to the library (TF32 permitted on Ampere and later);
// kNone where the plan chooses no such algorithm (the CPU's).
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
enum class ConvMath { kNone, kFma, kDefault, kTensorOp };
inline const char* conv_math_name(ConvMath m) {
  switch (m) {
    case ConvMath::kFma: return "FMA";
    case ConvMath::kDefault: return "default";
    case ConvMath::kTensorOp: return "tensor-op";
    case ConvMath::kNone: break;
  }
  return "none";
}

class ConvPlan {
 public:
  virtual ~ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  // The operands x, weight and dy are GemmOperands: where one carries its
  // bf16 rounding and the plan runs the pass in bf16, the plan reads that
  // copy instead of rounding the values again (the same bits: the conv
  // layer rounds each once per step, as the dense layer does); elsewhere
  // it reads the fp32 values.
  // y = conv(x, weight) + bias.
  virtual void forward(GemmOperand x, GemmOperand weight, const float* bias, float* y,
                       int rows) = 0;
  // dx = the gradient w.r.t. x from dy (overwritten).
  virtual void backward_data(GemmOperand dy, GemmOperand weight, float* dx, int rows) = 0;
  // dweight and dbias from x and dy, summed over the rows (overwritten).
  virtual void backward_weights(GemmOperand x, GemmOperand dy, float* dweight, float* dbias,
                                int rows) = 0;
  // Backend objects made so far (primitives and their argument memories):
  // unchanged by a pass whose row count was seen before.
  virtual std::size_t objects_created() const = 0;
  // The math of the algorithm the plan runs `pass` over `rows` with
  // (choosing it first if that row count is new).
  virtual ConvMath pass_math(ConvPass /*pass*/, int /*rows*/) { return ConvMath::kNone; }

 protected:
  ConvPlan() = default;
};

class PoolPlan {
 public:
  virtual ~PoolPlan() = default;
  PoolPlan(const PoolPlan&) = delete;
  PoolPlan& operator=(const PoolPlan&) = delete;

  // y = pool(x). Max pooling keeps where each window's maximum was, for
  // the backward that follows with the same rows (which of tied values is
  // the implementation's choice).
  virtual void forward(const float* x, float* y, int rows) = 0;
  // dx from dy (overwritten), after forward with the same rows.
  virtual void backward(const float* dy, float* dx, int rows) = 0;
  virtual std::size_t objects_created() const = 0;

 protected:
  PoolPlan() = default;
};

class SpatialKernels : public KernelFamily {
 public:
  static constexpr const char* kName = "spatial";

  // Throw Error(kUsage) when this backend cannot run the geometry.
  virtual std::unique_ptr<ConvPlan> conv_plan(const ConvGeometry& g) = 0;
  virtual std::unique_ptr<PoolPlan> pool_plan(const PoolGeometry& g) = 0;
};

}  // namespace dptrain
