// Implements: the CUDA convolution plan (cudnn_plans.hpp) on cuDNN's legacy
// convolution API: cudnnConvolutionForward + cudnnAddTensor (the bias),
// cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter +
// cudnnConvolutionBackwardBias, cross-correlation as torch computes it, on
// packed NCHW / NCDHW tensors and KCRS / KCTRS filters (torch's layouts, so
// no reorders). Per row count, the first time it is seen: the descriptors
// and one algorithm per pass (conv_algorithms.hpp). Under bf16 the operands
// are rounded into the shared bf16 buffers, cuDNN sums in fp32 and its bf16
// result is widened into the caller's fp32 tensor; the bias and its gradient
// stay fp32. Where cuDNN has no bf16 algorithm the row count runs in TF32.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/kernels.hpp"
#include "backends/cuda/cudnn/conv_algorithms.hpp"
#include "backends/cuda/cudnn/cudnn_plans.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::cuda {
namespace {

constexpr float kOne = 1.0f, kZero = 0.0f;
constexpr std::size_t kBf16Bytes = 2;
// By pass, in the order of dptrain::ConvPass (pass_math indexes them so).
constexpr std::array<ConvPass, 3> kPasses{ConvPass::kForward, ConvPass::kBackwardData,
                                          ConvPass::kBackwardFilter};

// The descriptors and algorithms of one row count.
struct RowPlan {
  ConvArithmetic arithmetic = ConvArithmetic::kFma;
  TensorDescriptor x, y;    // in the arithmetic's data type
  TensorDescriptor y_fp32;  // the fp32 output the bias works on, under bf16 only
  FilterDescriptor w;
  std::array<ConvolutionDescriptor, 3> conv;  // by pass: each keeps its algorithm's math type
  std::array<AlgorithmChoice, 3> algo;

  bool bf16() const { return arithmetic == ConvArithmetic::kBf16; }
  cudnnTensorDescriptor_t fp32_y() const { return bf16() ? y_fp32.get() : y.get(); }
};

ConvArithmetic arithmetic_of(Precision p) {
  switch (p) {
    case Precision::kFp32: return ConvArithmetic::kFma;
    case Precision::kTf32: return ConvArithmetic::kTf32;
    case Precision::kBf16: return ConvArithmetic::kBf16;
  }
  return ConvArithmetic::kFma;
}

std::string extent_text(const SpatialExtent& e, int dims) {
  std::string s;
  for (int d = 0; d < dims; ++d) {
    if (d) s += 'x';
    s += std::to_string(e[std::size_t(d)]);
  }
  return s;
}

std::string describe(const ConvGeometry& g) {
  return std::to_string(g.dims) + "-D convolution " + std::to_string(g.in_channels) + " -> " +
         std::to_string(g.out_channels) + " channels on " + extent_text(g.input, g.dims) +
         ", kernel " + extent_text(g.kernel, g.dims) + ", stride " + extent_text(g.stride, g.dims) +
         ", padding " + extent_text(g.padding, g.dims);
}

std::size_t elements(int rows, int channels, const SpatialExtent& e, int dims) {
  std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(channels);
  for (int d = 0; d < dims; ++d) n *= static_cast<std::size_t>(e[std::size_t(d)]);
  return n;
}

class CudnnConvPlan final : public ConvPlan {
 public:
  CudnnConvPlan(CudnnContext& context, const ConvGeometry& g)
      : c_(context), g_(g), by_rows_(static_cast<std::size_t>(std::max(g.max_rows, 0)) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "a convolution is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a convolution plan needs max_rows >= 1");
    bias_ = channel_descriptor(g.out_channels, g.dims);
    ++created_;
    row_plan(g.max_rows);  // the largest buffers exist before the first step
  }

  void forward(GemmOperand x, GemmOperand weight, const float* bias, float* y,
               int rows) override {
    const RowPlan& p = row_plan(rows);
    const void* xs = operand(p, x, in_elements(rows), 0);
    const void* ws = weight_operand(p, weight);
    void* out = p.bf16() ? c_.bf16(2).get() : y;
    DPT_CUDNN_CHECK(
        cudnnConvolutionForward(c_.handle(), &kOne, p.x.get(), xs, p.w.get(), ws, p.conv[0].get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(p.algo[0].algo),
                                c_.workspace().get(), p.algo[0].workspace, &kZero, p.y.get(), out));
    if (p.bf16()) from_bf16(c_.launch(), out, y, out_elements(rows));
    DPT_CUDNN_CHECK(cudnnAddTensor(c_.handle(), &kOne, bias_.get(), bias, &kOne, p.fp32_y(), y));
  }

  void backward_data(GemmOperand dy, GemmOperand weight, float* dx, int rows) override {
    const RowPlan& p = row_plan(rows);
    const void* dys = operand(p, dy, out_elements(rows), 0);
    const void* ws = weight_operand(p, weight);
    void* out = p.bf16() ? c_.bf16(2).get() : dx;
    DPT_CUDNN_CHECK(cudnnConvolutionBackwardData(
        c_.handle(), &kOne, p.w.get(), ws, p.y.get(), dys, p.conv[1].get(),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo[1].algo), c_.workspace().get(),
        p.algo[1].workspace, &kZero, p.x.get(), out));
    if (p.bf16()) from_bf16(c_.launch(), out, dx, in_elements(rows));
  }

  void backward_weights(GemmOperand x, GemmOperand dy, float* dweight, float* dbias,
                        int rows) override {
    const RowPlan& p = row_plan(rows);
    const void* xs = operand(p, x, in_elements(rows), 0);
    const void* dys = operand(p, dy, out_elements(rows), 1);
    const bool staged = !p.bf16() && !aligned(dweight);
    void* out = p.bf16() ? c_.bf16(2).get() : staged ? c_.aligned_weight().get() : dweight;
    DPT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        c_.handle(), &kOne, p.x.get(), xs, p.y.get(), dys, p.conv[2].get(),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo[2].algo), c_.workspace().get(),
        p.algo[2].workspace, &kZero, p.w.get(), out));
    if (p.bf16()) from_bf16(c_.launch(), out, dweight, weight_elements());
    if (staged)
      DPT_CUDA_CHECK(cudaMemcpyAsync(dweight, out, weight_elements() * sizeof(float),
                                     cudaMemcpyDeviceToDevice, c_.launch().stream));
    DPT_CUDNN_CHECK(cudnnConvolutionBackwardBias(c_.handle(), &kOne, p.fp32_y(), dy.data, &kZero,
                                                 bias_.get(), dbias));
  }

  std::size_t objects_created() const override { return created_; }

  ConvMath pass_math(dptrain::ConvPass pass, int rows) override {
    switch (row_plan(rows).algo[static_cast<std::size_t>(pass)].math) {
      case CUDNN_TENSOR_OP_MATH:
      case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return ConvMath::kTensorOp;
      case CUDNN_FMA_MATH: return ConvMath::kFma;
      case CUDNN_DEFAULT_MATH: return ConvMath::kDefault;
    }
    return ConvMath::kDefault;
  }

 private:
  const RowPlan& row_plan(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "convolution over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) slot = create(rows);
    return *slot;
  }

  // src itself, or under bf16 the caller's rounding of it, or its rounded
  // copy in bf16 buffer `slot`.
  const void* operand(const RowPlan& p, GemmOperand src, std::size_t n, int slot) {
    if (!p.bf16()) return src.data;
    if (src.bf16) return src.bf16;
    void* copy = c_.bf16(slot).get();
    to_bf16(c_.launch(), src.data, copy, n);
    return copy;
  }

  // Activations are buffers of their own (cudaMalloc: 256-byte aligned);
  // a weight is a slice of the parameter arena at whatever offset the
  // layers before it leave, and tensor-core kernels read 16 bytes at a time.
  static bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

  // The weight as a pass reads it: its bf16 copy, the weight itself, or an
  // aligned copy of it.
  const void* weight_operand(const RowPlan& p, GemmOperand w) {
    if (p.bf16()) return operand(p, w, weight_elements(), 1);
    const float* weight = w.data;
    if (aligned(weight)) return weight;
    void* copy = c_.aligned_weight().get();
    DPT_CUDA_CHECK(cudaMemcpyAsync(copy, weight, weight_elements() * sizeof(float),
                                   cudaMemcpyDeviceToDevice, c_.launch().stream));
    return copy;
  }

  std::size_t in_elements(int rows) const {
    return elements(rows, g_.in_channels, g_.input, g_.dims);
  }
  std::size_t out_elements(int rows) const {
    return elements(rows, g_.out_channels, g_.output, g_.dims);
  }
  std::size_t weight_elements() const {
    return elements(g_.out_channels, g_.in_channels, g_.kernel, g_.dims);
  }

  std::unique_ptr<RowPlan> create(int rows);
  std::unique_ptr<RowPlan> choose(int rows, std::size_t max_workspace);
  std::unique_ptr<RowPlan> try_create(int rows, ConvArithmetic a, std::size_t max_workspace);
  FilterDescriptor filter_descriptor(cudnnDataType_t type);
  ConvolutionDescriptor convolution_descriptor();
  void check_output(const RowPlan& p, int rows) const;

  CudnnContext& c_;
  ConvGeometry g_;
  std::vector<std::unique_ptr<RowPlan>> by_rows_;  // [rows], made on first use
  TensorDescriptor bias_;                          // [1, out, 1, 1(, 1)], fp32
  std::optional<ConvPass> unmatched_;              // the pass try_create found no algorithm for
  std::size_t created_ = 0;
};

// The row count's descriptors and algorithms, and the buffers they need.
// When the GPU has no room for the chosen algorithms' workspace, the best
// ones that need less are chosen instead, until the workspace fits (the
// workspace already held always does). Such a choice depends on the memory
// left, so it may differ between runs; the note says so.
std::unique_ptr<RowPlan> CudnnConvPlan::create(int rows) {
  std::unique_ptr<RowPlan> p = choose(rows, kMaxConvWorkspace);
  for (;;) {
    std::size_t need = 0;
    for (const AlgorithmChoice& a : p->algo) need = std::max(need, a.workspace);
    if (c_.workspace().try_reserve(need, c_.launch().stream)) break;
    note_once(NoteTopic::kWorkspaceFallback,
              "the GPU has no room for the " + std::to_string(need) +
                  " bytes of cuDNN workspace that the " + describe(g_) + " over " +
                  std::to_string(rows) +
                  " rows would take; it and such convolutions run with "
                  "algorithms that need less (slower, and chosen by the memory left)");
    p = choose(rows, need - 1);  // need > the workspace held >= 0
  }
  c_.aligned_weight().reserve(weight_elements() * sizeof(float), c_.launch().stream);
  if (p->bf16()) {
    const std::size_t most =
        std::max({in_elements(rows), out_elements(rows), weight_elements()}) * kBf16Bytes;
    for (int slot = 0; slot < 3; ++slot) c_.bf16(slot).reserve(most, c_.launch().stream);
  }
  return p;
}

// The precision's algorithms of at most max_workspace bytes, or TF32's
// where bf16 has none; a usage error when neither has.
std::unique_ptr<RowPlan> CudnnConvPlan::choose(int rows, std::size_t max_workspace) {
  const ConvArithmetic wanted = arithmetic_of(c_.precision());
  std::unique_ptr<RowPlan> p = try_create(rows, wanted, max_workspace);
  if (!p && wanted == ConvArithmetic::kBf16) {
    const std::string room = max_workspace >= kMaxConvWorkspace
                                 ? ""
                                 : " that needs less than the " +
                                       std::to_string(max_workspace + 1) +
                                       " bytes of workspace the GPU has no room for";
    note_once(NoteTopic::kBf16Fallback, "cuDNN has no bf16 " + std::string(pass_name(*unmatched_)) +
                                            " algorithm" + room + " for the " + describe(g_) +
                                            " over " + std::to_string(rows) +
                                            " rows; such convolutions run in TF32 instead");
    p = try_create(rows, ConvArithmetic::kTf32, max_workspace);
  }
  if (p) return p;
  const std::string what = "cuDNN offers no deterministic " + std::string(pass_name(*unmatched_)) +
                           " algorithm for the " + describe(g_);
  if (max_workspace >= kMaxConvWorkspace)
    throw Error(ExitCode::kUsage, what + "; use --device cpu");
  throw Error(ExitCode::kUsage,
              what + " over " + std::to_string(rows) + " rows that needs less than the " +
                  std::to_string(max_workspace + 1) +
                  " bytes of workspace the GPU has no room for; use fewer rows per GPU "
                  "(--batch-size), smaller inputs, or --device cpu");
}

// nullptr (and unmatched_ set) when a pass has no algorithm under a.
std::unique_ptr<RowPlan> CudnnConvPlan::try_create(int rows, ConvArithmetic a,
                                                   std::size_t max_workspace) {
  auto p = std::make_unique<RowPlan>();
  p->arithmetic = a;
  const cudnnDataType_t type = p->bf16() ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  p->x = activation_descriptor(rows, g_.in_channels, g_.dims, g_.input, type);
  p->y = activation_descriptor(rows, g_.out_channels, g_.dims, g_.output, type);
  p->w = filter_descriptor(type);
  created_ += 3;
  if (p->bf16()) {
    p->y_fp32 = activation_descriptor(rows, g_.out_channels, g_.dims, g_.output, CUDNN_DATA_FLOAT);
    ++created_;
  }
  for (ConvolutionDescriptor& d : p->conv) d = convolution_descriptor();
  check_output(*p, rows);
  const ConvOperands o{p->x.get(), p->y.get(), p->w.get()};
  for (std::size_t i = 0; i < kPasses.size(); ++i) {
    const std::optional<AlgorithmChoice> choice =
        choose_algorithm(c_.handle(), kPasses[i], o, p->conv[i].get(), a, max_workspace);
    if (!choice) {
      unmatched_ = kPasses[i];
      return nullptr;
    }
    p->algo[i] = *choice;
    ++created_;
  }
  return p;
}

FilterDescriptor CudnnConvPlan::filter_descriptor(cudnnDataType_t type) {
  std::vector<int> shape{g_.out_channels, g_.in_channels};
  for (int d = 0; d < g_.dims; ++d) shape.push_back(g_.kernel[std::size_t(d)]);
  FilterDescriptor f = FilterDescriptor::create();
  DPT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(f.get(), type, CUDNN_TENSOR_NCHW,
                                             static_cast<int>(shape.size()), shape.data()));
  return f;
}

// Zero padding alike on both sides, as torch pads; fp32 accumulation for
// every data type.
ConvolutionDescriptor CudnnConvPlan::convolution_descriptor() {
  const std::array<int, 3> dilation{1, 1, 1};
  ConvolutionDescriptor d = ConvolutionDescriptor::create();
  DPT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(d.get(), g_.dims, g_.padding.data(),
                                                  g_.stride.data(), dilation.data(),
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  ++created_;
  return d;
}

// cuDNN floors (in + 2p - k) / s + 1 as the layer does; a mismatch would
// be a bug here, caught before anything runs.
void CudnnConvPlan::check_output(const RowPlan& p, int rows) const {
  std::array<int, 5> got{};
  DPT_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(p.conv[0].get(), p.x.get(), p.w.get(),
                                                        g_.dims + 2, got.data()));
  std::array<int, 5> want{rows, g_.out_channels, g_.output[0], g_.output[1], g_.output[2]};
  for (int i = 0; i < g_.dims + 2; ++i)
    DPT_REQUIRE(got[std::size_t(i)] == want[std::size_t(i)], ExitCode::kOther,
                "cuDNN's output shape differs from the layer's for the " + describe(g_));
}

}  // namespace

std::unique_ptr<ConvPlan> make_cudnn_conv_plan(CudnnContext& context, const ConvGeometry& g) {
  return std::make_unique<CudnnConvPlan>(context, g);
}

}  // namespace dptrain::cuda
