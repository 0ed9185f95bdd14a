// Implements: `--attention cudnn` — FusedAttentionKernels on cuDNN's fused
// scaled-dot-product attention (the backend-API graphs of sdpa_graphs.hpp),
// and the choice of the CUDA backend's attention table (make_attention_kernels,
// which cuda_backend.cpp calls; no_cudnn/attention_kernels.cpp is the one
// of a build without cuDNN).
//
// cuDNN runs SDPA in bf16 (and fp16) only, so this table exists under
// --precision bf16: cuDNN reads Q, K and V through strides from the
// layer's bf16 qkv where it keeps qkv so (reads_qkv_bf16), else from the
// fp32 qkv rounded into staging, and writes O into a bf16
// [N, T, H, hd] buffer (the layer's bf16 copy of o where it keeps one,
// else staging), expanded to the fp32 o; its Stats are the fp32 lse.
// Backward rounds do, qkv again where it is fp32, and o where the layer
// kept no copy (a later layer's forward may have reused the staging),
// writes dQ, dK and dV
// through strides into a bf16 [N, T, 3, H, hd] buffer (the layer's copy of
// dqkv, or staging), expanded to the fp32 dqkv; Σ dO ∘ O lands in the
// layer's rowdot scratch. The staging and cuDNN's workspace are counted
// with the backend's DeviceBuffers (Backend::count_buffer: the start-up
// summary's memory line and peak_device). Both graphs and their plans are made the first
// time a shape (N, T, H, hd, causal) is seen and kept; the staging buffers
// and cuDNN's workspace grow then and only then. Where cuDNN refuses a
// shape (graph, heuristics, plan), the table says so once on stderr and
// runs the own fused kernels for it, forward and backward alike.
//
// The first run of each shape is checked against the fused kernels on the
// same inputs (these graphs cannot be tried on every GPU and cuDNN release
// they will meet, and `auto` picks them): o and lse after the first
// forward, dqkv after the first backward, each within what bf16 allows
// (against the tensor's largest magnitude m: o 1e-2·m, lse 1e-4·m, dqkv
// 3e-2·m; tests/gpu/test_cudnn_attention.cpp derives them). Where cuDNN's
// results are further off, or not finite where the fused ones are, or its
// first execution of a plan answers an error, the table says so once, runs
// the fused kernels again for that call's results (and bf16 copies) and
// runs the shape on them from then on. The check costs one fused pass and
// a few downloads per shape, once.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cudnn/cudnn_context.hpp"
#include "backends/cuda/cudnn/sdpa_graphs.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/kernel_factory.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/fused_attention_kernels.hpp"

namespace dptrain::cuda {

std::unique_ptr<FusedAttentionKernels> make_fused_attention(const Launch& l, Precision p,
                                                            bool requested);

namespace {

constexpr std::size_t kBf16Bytes = 2;

struct SdpaPlans {
  ExecutionPlan forward, backward;
  bool forward_checked = false, backward_checked = false;  // against the fused kernels
};

// The bounds of the first-use check, relative to the largest |value| of
// the fused kernels' tensor.
constexpr double kOutputBound = 1e-2, kLseBound = 1e-4, kGradientBound = 3e-2;

// max |got - want| / max |want| (with a floor of 1e-30 under the latter);
// NaN where got has a non-finite value or the gap is not a number.
double relative_gap(const std::vector<float>& got, const std::vector<float>& want) {
  double gap = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) return std::nan("");
    gap = std::max(gap, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return gap / scale;
}

class CudnnAttention final : public FusedAttentionKernels {
 public:
  CudnnAttention(const Launch& l, Backend& be, bool requested,
                 std::unique_ptr<FusedAttentionKernels> fused)
      : launch_(l), backend_(be), requested_(requested), fused_(std::move(fused)) {}
  ~CudnnAttention() override { backend_.count_buffer(staged_bytes(), false); }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The head dimensions of the fused kernels, which run any shape cuDNN refuses.
  std::string unsupported(int head_dim) const override { return fused_->unsupported(head_dim); }
  bool requested() const override { return requested_; }
  bool reads_qkv_bf16() const override { return true; }
  std::string implementation() const override {
    bool ran = plans_.empty(), refused = false;
    for (const auto& [shape, plans] : plans_) (plans ? ran : refused) = true;
    return ran ? (refused ? "cudnn, fused-fallback for some shapes" : "cudnn") : "fused-fallback";
  }

  void forward(GemmOperand qkv, const HeadShape& s, float scale, bool causal, float* o,
               float* lse, std::uint16_t* o_bf16) override {
    SdpaPlans* plans = plans_for(s, causal);
    auto fused = [&] { fused_->forward(qkv, s, scale, causal, o, lse, o_bf16); };
    if (!plans) return fused();
    auto run = [&] { run_forward(plans, qkv, s, scale, causal, o, lse, o_bf16); };
    if (plans->forward_checked) return run();
    plans->forward_checked = true;
    if (!first_run(s, causal, "forward", run)) return fused();
    if (!forward_agrees(qkv, s, scale, causal, o, o_bf16, lse)) fused();
  }

  void backward(GemmOperand qkv, const float* o, const float* lse, GemmOperand d_o,
                const HeadShape& s, float scale, bool causal, float* rowdot, float* dqkv,
                const std::uint16_t* o_bf16, std::uint16_t* dqkv_bf16) override {
    SdpaPlans* plans = plans_for(s, causal);
    auto fused = [&] {
      fused_->backward(qkv, o, lse, d_o, s, scale, causal, rowdot, dqkv, o_bf16, dqkv_bf16);
    };
    if (!plans) return fused();
    auto run = [&] {
      run_backward(plans, {qkv, o, lse, d_o, o_bf16}, s, scale, causal, rowdot, dqkv, dqkv_bf16);
    };
    if (plans->backward_checked) return run();
    plans->backward_checked = true;
    if (!first_run(s, causal, "backward", run)) return fused();
    if (!backward_agrees({qkv, o, lse, d_o, o_bf16}, s, scale, causal, dqkv, dqkv_bf16)) fused();
  }

 private:
  using ShapeKey = std::tuple<int, int, int, int, bool>;
  // What backward reads: o_bf16 may be null (o is rounded then), and so
  // may d_o.bf16 (d_o.data is rounded then).
  struct BackwardInputs {
    GemmOperand qkv;
    const float *o, *lse;
    GemmOperand d_o;
    const std::uint16_t* o_bf16;
  };

  // O is written in bf16 into o_bf16 where the caller keeps that copy (else
  // the staging) and expanded into o where the caller has one.
  void run_forward(const SdpaPlans* plans, GemmOperand qkv, const HeadShape& s, float scale,
                   bool causal, float* o, float* lse, std::uint16_t* o_bf16) {
    void* q16 = qkv_bf16(qkv, s);
    void* o16 = o_bf16 ? static_cast<void*>(o_bf16) : staging(o16_, head_values(s));
    float scale_value = scale, mask_value = -std::numeric_limits<float>::infinity();
    std::vector<std::int64_t> uids{kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaStats, kSdpaScale};
    std::vector<void*> at{slice(q16, s, 0), slice(q16, s, 1), slice(q16, s, 2), o16, lse,
                          &scale_value};
    if (causal) bind(uids, at, kSdpaMaskValue, &mask_value);
    execute(handle(), plans->forward, uids, at, workspace_.get());
    if (o) from_bf16(launch_, o16, o, head_values(s));
  }

  // O and dO are read from the caller's bf16 copies where it has them
  // (else rounded into the staging); dQ, dK and dV are written into
  // dqkv_bf16 where given (else the staging), expanded into dqkv where the
  // caller has one.
  void run_backward(const SdpaPlans* plans, const BackwardInputs& in, const HeadShape& s,
                    float scale, bool causal, float* rowdot, float* dqkv,
                    std::uint16_t* dqkv_bf16) {
    const float* lse = in.lse;
    void* q16 = qkv_bf16(in.qkv, s);
    void* o16 = const_cast<std::uint16_t*>(in.o_bf16);
    if (!o16) {
      o16 = staging(o16_, head_values(s));
      to_bf16(launch_, in.o, o16, head_values(s));
    }
    void* do16 = const_cast<std::uint16_t*>(in.d_o.bf16);
    if (!do16) {
      do16 = staging(do16_, head_values(s));
      to_bf16(launch_, in.d_o.data, do16, head_values(s));
    }
    void* dqkv16 = dqkv_bf16 ? static_cast<void*>(dqkv_bf16) : staging(dqkv16_, qkv_values(s));
    DPT_CUDA_CHECK(cudaMemsetAsync(dq_accum_.get(), 0, head_values(s) * sizeof(float),
                                   launch_.stream));
    float scale_value = scale, mask_value = -std::numeric_limits<float>::infinity();
    std::vector<std::int64_t> uids{kSdpaQ,  kSdpaK,     kSdpaKRows, kSdpaV,      kSdpaO,
                                   kSdpaDO, kSdpaStats, kSdpaScale, kSdpaRowDot, kSdpaDQAccum};
    std::vector<void*> at{slice(q16, s, 0), slice(q16, s, 1), slice(q16, s, 1),
                          slice(q16, s, 2), o16,              do16,
                          const_cast<float*>(lse), &scale_value, rowdot,
                          dq_accum_.get()};
    if (causal) bind(uids, at, kSdpaMaskValue, &mask_value);
    bind(uids, at, kSdpaDQ, slice(dqkv16, s, 0));
    bind(uids, at, kSdpaDK, slice(dqkv16, s, 1));
    bind(uids, at, kSdpaDV, slice(dqkv16, s, 2));
    execute(handle(), plans->backward, uids, at, workspace_.get());
    if (dqkv) from_bf16(launch_, dqkv16, dqkv, qkv_values(s));
  }

  // The first run of a plan: false, the shape rejected, where cuDNN
  // answers its execution with an error (a plan that finalized and cannot
  // run here); the caller then runs the fused kernels. Later runs of a
  // checked plan that fail are errors.
  template <typename Run>
  bool first_run(const HeadShape& s, bool causal, const char* pass, Run run) {
    try {
      run();
      return true;
    } catch (const Error& e) {
      reject(s, causal, std::string("its first ") + pass + " failed: " + e.what());
      return false;
    }
  }

  // The first forward of a shape against the fused kernels' o and lse;
  // false where cuDNN's are off: the shape runs fused from now on, and the
  // caller runs the fused kernels again for this call's results. cuDNN's o
  // is the caller's fp32 o, or where it keeps o in bf16 alone that copy.
  bool forward_agrees(GemmOperand qkv, const HeadShape& s, float scale, bool causal,
                      const float* o, const std::uint16_t* o_bf16, const float* lse) {
    const std::size_t rows = static_cast<std::size_t>(s.batch) * s.heads * s.tokens;
    DeviceBuffer<float> want_o(backend_, head_values(s)), want_lse(backend_, rows);
    fused_->forward(qkv, s, scale, causal, want_o.get(), want_lse.get());
    const double gap_o = relative_gap(download(o, o_bf16, want_o.size()), download(want_o));
    const double gap_lse = relative_gap(download(lse, rows), download(want_lse));
    if (gap_o <= kOutputBound && gap_lse <= kLseBound) return true;
    reject(s, causal, differs("forward", "o " + number(gap_o) + ", lse " + number(gap_lse)));
    return false;
  }

  // The first backward of a shape against the fused kernels' dqkv, as above.
  bool backward_agrees(const BackwardInputs& in, const HeadShape& s, float scale, bool causal,
                       const float* dqkv, const std::uint16_t* dqkv_bf16) {
    const std::size_t rows = static_cast<std::size_t>(s.batch) * s.heads * s.tokens;
    DeviceBuffer<float> want(backend_, qkv_values(s)), rowdot(backend_, rows);
    fused_->backward(in.qkv, in.o, in.lse, in.d_o, s, scale, causal, rowdot.get(), want.get(),
                     in.o_bf16, nullptr);
    const double gap =
        relative_gap(download(dqkv, dqkv_bf16, want.size()), download(want));
    if (gap <= kGradientBound) return true;
    reject(s, causal, differs("backward", "dqkv " + number(gap)));
    return false;
  }

  // n values of a tensor on the device: its fp32 values where p is not
  // null, else its bf16 copy's.
  std::vector<float> download(const float* p, const std::uint16_t* copy, std::size_t n) {
    if (p) return download(p, n);
    std::vector<std::uint16_t> bits(n);
    backend_.copy_to_host(bits.data(), copy, n * sizeof(std::uint16_t));
    std::vector<float> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = bf16_value(bits[i]);
    return host;
  }
  std::vector<float> download(const float* p, std::size_t n) {
    std::vector<float> host(n);
    backend_.copy_to_host(host.data(), p, n * sizeof(float));
    return host;
  }
  std::vector<float> download(const DeviceBuffer<float>& b) { return download(b.get(), b.size()); }
  static std::string number(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return text;
  }

  static std::string differs(const char* pass, const std::string& gaps) {
    return std::string("its ") + pass + " differs from the fused kernels' by " + gaps +
           " of their largest values, past bf16's bounds";
  }

  // The shape runs on the fused kernels from now on, said once per table.
  void reject(const HeadShape& s, bool causal, const std::string& why) {
    plans_[ShapeKey{s.batch, s.tokens, s.heads, s.head_dim, causal}].reset();
    note_fallback(s, causal, why);
  }

  static std::size_t head_values(const HeadShape& s) {
    return static_cast<std::size_t>(s.batch) * s.tokens * s.heads * s.head_dim;
  }
  static std::size_t qkv_values(const HeadShape& s) { return 3 * head_values(s); }
  static void bind(std::vector<std::int64_t>& uids, std::vector<void*>& at, std::int64_t uid,
                   void* p) {
    uids.push_back(uid);
    at.push_back(p);
  }
  // qkv in bf16: the caller's copy where it has one, else its fp32 values
  // rounded into the staging.
  void* qkv_bf16(GemmOperand qkv, const HeadShape& s) {
    if (qkv.bf16) return const_cast<std::uint16_t*>(qkv.bf16);
    void* q16 = staging(qkv16_, qkv_values(s));
    to_bf16(launch_, qkv.data, q16, qkv_values(s));
    return q16;
  }
  // Q, K or V (which = 0, 1, 2) in a bf16 tensor of qkv's layout (qkv's,
  // or their gradients').
  static void* slice(void* qkv_layout, const HeadShape& s, int which) {
    const SdpaShape shape{s.batch, s.heads, s.tokens, s.head_dim, false};
    return static_cast<char*>(qkv_layout) + sdpa_qkv_offset(shape, which) * kBf16Bytes;
  }

  cudnnHandle_t handle() {
    if (!handle_.get()) {
      handle_ = CudnnHandle::create();
      DPT_CUDNN_CHECK(cudnnSetStream(handle_.get(), launch_.stream));
    }
    return handle_.get();
  }

  // The plans of this shape, made on first sight; null where cuDNN refused it.
  SdpaPlans* plans_for(const HeadShape& s, bool causal) {
    const ShapeKey key{s.batch, s.tokens, s.heads, s.head_dim, causal};
    const auto known = plans_.find(key);
    if (known != plans_.end()) return known->second.get();
    std::unique_ptr<SdpaPlans>& made = plans_[key];
    const SdpaShape shape{s.batch, s.heads, s.tokens, s.head_dim, causal};
    try {
      // Both graphs first: a refusal of either is found before any plan.
      OperationGraph forward = sdpa_forward_graph(handle(), shape);
      OperationGraph backward = sdpa_backward_graph(handle(), shape);
      auto plans = std::make_unique<SdpaPlans>(
          SdpaPlans{sdpa_forward_plan(handle(), std::move(forward)),
                    sdpa_backward_plan(handle(), std::move(backward))});
      reserve_buffers(s, *plans);
      made = std::move(plans);
    } catch (const std::exception& e) {  // CudnnRefusal, or no handle on this machine
      note_fallback(s, causal, e.what());
    }
    return made.get();
  }

  // The staging and the workspace, counted as the backend's DeviceBuffers
  // are (the memory line), growing only with a shape's plans (dQ's
  // accumulator, the workspace) and in staging().
  std::size_t staged_bytes() const {
    return qkv16_.bytes() + dqkv16_.bytes() + o16_.bytes() + do16_.bytes() + dq_accum_.bytes() +
           workspace_.bytes();
  }
  void reserve_buffers(const HeadShape& s, const SdpaPlans& p) {
    const cudaStream_t stream = launch_.stream;
    const std::size_t before = staged_bytes();
    dq_accum_.reserve(head_values(s) * sizeof(float), stream);
    const std::int64_t work = std::max(p.forward.workspace_bytes, p.backward.workspace_bytes);
    workspace_.reserve(static_cast<std::size_t>(std::max<std::int64_t>(work, 1)), stream);
    backend_.count_buffer(before, false);
    backend_.count_buffer(staged_bytes(), true);
  }

  // The bf16 staging of qkv, o, do or dqkv (`values` of them) for a
  // caller that does not hand over its copy: reserved the first time such
  // a call needs it. The attention layer under bf16 always hands its
  // copies over, so it never reserves these.
  void* staging(GrowingBuffer& b, std::size_t values) {
    if (b.bytes() < values * kBf16Bytes) {
      const std::size_t before = staged_bytes();
      b.reserve(values * kBf16Bytes, launch_.stream);
      backend_.count_buffer(before, false);
      backend_.count_buffer(staged_bytes(), true);
    }
    return b.get();
  }

  // One line on stderr, the first time only for this table.
  void note_fallback(const HeadShape& s, bool causal, const std::string& why) {
    if (noted_) return;
    noted_ = true;
    std::fprintf(stderr,
                 "dptrain: note: --attention cudnn: cuDNN cannot run attention of %d rows x %d "
                 "tokens x %d heads x %d dims%s here (%s); using the fused kernels for it\n",
                 s.batch, s.tokens, s.heads, s.head_dim, causal ? ", causal" : "", why.c_str());
  }

  Launch launch_;
  Backend& backend_;  // owns this table; counts its device memory
  bool requested_;
  std::unique_ptr<FusedAttentionKernels> fused_;
  CudnnHandle handle_;
  std::map<ShapeKey, std::unique_ptr<SdpaPlans>> plans_;  // null: cuDNN refused the shape
  bool noted_ = false;
  GrowingBuffer qkv16_, dqkv16_, o16_, do16_, dq_accum_, workspace_;
};

}  // namespace

// The attention table --attention asks for; null for math. cuDNN's under
// bf16 for cudnn and auto; fused otherwise, with a note where cudnn was
// asked for by name under fp32 or tf32 (cuDNN's SDPA has no fp32).
std::unique_ptr<FusedAttentionKernels> make_attention_kernels(const Launch& l, Precision p,
                                                              AttentionImpl impl, Backend& be) {
  if (impl == AttentionImpl::kMath) return nullptr;
  const bool by_name = impl != AttentionImpl::kAuto;
  if (impl == AttentionImpl::kFused || p != Precision::kBf16) {
    if (impl == AttentionImpl::kCudnn)
      std::fprintf(stderr,
                   "dptrain: note: --attention cudnn: cuDNN's fused attention runs in bf16 only, "
                   "not under this --precision; using the fused kernels\n");
    return make_fused_attention(l, p, by_name);
  }
  return std::make_unique<CudnnAttention>(l, be, by_name, make_fused_attention(l, p, by_name));
}

}  // namespace dptrain::cuda
