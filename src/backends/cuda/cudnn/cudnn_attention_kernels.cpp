// Implements: `--attention cudnn` — FusedAttentionKernels on cuDNN's fused
// scaled-dot-product attention (the backend-API graphs of sdpa_graphs.hpp),
// and the choice of the CUDA backend's attention table (make_attention_kernels,
// which cuda_backend.cpp calls; no_cudnn/attention_kernels.cpp is the one
// of a build without cuDNN).
//
// cuDNN runs SDPA in bf16 only here, so this table exists under
// --precision bf16: cuDNN reads Q, K and V through strides from the layer's
// bf16 qkv (else from the fp32 qkv rounded into staging) and writes O into
// a bf16 [N, T, H, hd] buffer (the layer's copy of o, else staging,
// expanded to an fp32 o where the caller has one); its Stats are the fp32
// lse. Backward reads do and o in bf16 (rounded into staging where the
// caller has no copy), writes dQ, dK and dV through strides into a bf16
// [N, T, 3, H, hd] buffer (the layer's copy of dqkv, else staging,
// expanded likewise) and Σ dO ∘ O into the layer's rowdot. The staging and
// cuDNN's workspace are counted with the backend's DeviceBuffers
// (Backend::count_buffer: the memory line and peak_device). Both graphs
// and their plans are made the first time a shape (N, T, H, hd, causal) is
// seen and kept; cuDNN's workspace grows then and only then (the
// backward's holds dP, N·H·T·T bf16 values: its deterministic algorithm's
// price). Where cuDNN refuses a pass of a shape (graph, heuristics, plan),
// the table says so once on stderr and runs the fused kernels for that
// pass: forward and backward are planned, checked and replaced apart (the
// fused kernels' lse is cuDNN's Stats, so either pass reads the other's).
//
// The first run of each pass of a shape is checked against the fused
// kernels on the same inputs (these graphs cannot be tried on every GPU and
// cuDNN release they will meet, and `auto` picks them): o and lse, then
// dqkv, each within what bf16 allows (attention_check.hpp). Where cuDNN's
// results are further off, or not finite where the fused ones are, or its
// first execution of a plan answers an error, or the first backward run
// twice does not repeat bit for bit (cuDNN's engines say whether they are
// deterministic only in notes that cudnn-frontend does not read), the table
// says so once, runs the fused kernels again for that call's results (and
// bf16 copies) and runs that pass of the shape on them from then on. The
// check costs one fused pass, one more cuDNN backward and a few downloads
// per shape, once.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cudnn/attention_check.hpp"
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
constexpr int kForwardPass = 1, kBackwardPass = 2;  // bits of the passes a note speaks for

// A shape's plans, each null where cuDNN refused that pass or its first
// use failed the check (the fused kernels run it).
struct SdpaPlans {
  std::unique_ptr<ExecutionPlan> forward, backward;
  bool forward_checked = false, backward_checked = false;  // against the fused kernels
};

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
  // "cudnn" where cuDNN runs every pass met, "fused-fallback" where none,
  // else "cudnn, fused-fallback for some passes".
  std::string implementation() const override {
    bool ran = plans_.empty(), refused = false;
    for (const auto& [shape, plans] : plans_)
      for (const auto* pass : {&plans.forward, &plans.backward}) (*pass ? ran : refused) = true;
    return ran ? (refused ? "cudnn, fused-fallback for some passes" : "cudnn") : "fused-fallback";
  }

  void forward(GemmOperand qkv, const HeadShape& s, float scale, bool causal, float* o,
               float* lse, std::uint16_t* o_bf16) override {
    SdpaPlans& plans = plans_for(s, causal);
    auto fused = [&] { fused_->forward(qkv, s, scale, causal, o, lse, o_bf16); };
    if (!plans.forward) return fused();
    auto run = [&] { run_forward(*plans.forward, qkv, s, scale, causal, o, lse, o_bf16); };
    if (plans.forward_checked) return run();
    plans.forward_checked = true;
    if (!first_run(s, causal, "forward", run)) return fused();
    if (!forward_agrees(qkv, s, scale, causal, o, o_bf16, lse)) fused();
  }

  void backward(GemmOperand qkv, const float* o, const float* lse, GemmOperand d_o,
                const HeadShape& s, float scale, bool causal, float* rowdot, float* dqkv,
                const std::uint16_t* o_bf16, std::uint16_t* dqkv_bf16) override {
    SdpaPlans& plans = plans_for(s, causal);
    auto fused = [&] {
      fused_->backward(qkv, o, lse, d_o, s, scale, causal, rowdot, dqkv, o_bf16, dqkv_bf16);
    };
    if (!plans.backward) return fused();
    const BackwardInputs in{qkv, o, lse, d_o, o_bf16};
    auto run = [&] {
      run_backward(*plans.backward, in, s, scale, causal, rowdot, dqkv, dqkv_bf16);
    };
    if (plans.backward_checked) return run();
    plans.backward_checked = true;
    if (!first_run(s, causal, "backward", run)) return fused();
    if (!backward_repeats(s, causal, run, dqkv, dqkv_bf16) ||
        !backward_agrees(in, s, scale, causal, dqkv, dqkv_bf16))
      fused();
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
  void run_forward(const ExecutionPlan& plan, GemmOperand qkv, const HeadShape& s, float scale,
                   bool causal, float* o, float* lse, std::uint16_t* o_bf16) {
    void* q16 = qkv_bf16(qkv, s);
    void* o16 = o_bf16 ? static_cast<void*>(o_bf16) : staging(o16_, head_values(s));
    float scale_value = scale, mask_value = -std::numeric_limits<float>::infinity();
    std::vector<std::int64_t> uids{kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaStats, kSdpaScale};
    std::vector<void*> at{slice(q16, s, 0), slice(q16, s, 1), slice(q16, s, 2), o16, lse,
                          &scale_value};
    if (causal) bind(uids, at, kSdpaMaskValue, &mask_value);
    execute(handle(), plan, uids, at, workspace_.get());
    if (o) from_bf16(launch_, o16, o, head_values(s));
  }

  // O and dO are read from the caller's bf16 copies where it has them
  // (else rounded into the staging); dQ, dK and dV are written into
  // dqkv_bf16 where given (else the staging), expanded into dqkv where the
  // caller has one.
  void run_backward(const ExecutionPlan& plan, const BackwardInputs& in, const HeadShape& s,
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
    float scale_value = scale, one = 1.0f, mask_value = -std::numeric_limits<float>::infinity();
    std::vector<std::int64_t> uids{kSdpaQ,     kSdpaK,      kSdpaV,      kSdpaO,  kSdpaDO,
                                   kSdpaStats, kSdpaScale,  kSdpaRowDot, kSdpaOne};
    std::vector<void*> at{slice(q16, s, 0), slice(q16, s, 1),        slice(q16, s, 2),
                          o16,              do16,                    const_cast<float*>(lse),
                          &scale_value,     rowdot,                  &one};
    if (causal) bind(uids, at, kSdpaMaskValue, &mask_value);
    bind(uids, at, kSdpaDQ, slice(dqkv16, s, 0));
    bind(uids, at, kSdpaDK, slice(dqkv16, s, 1));
    bind(uids, at, kSdpaDV, slice(dqkv16, s, 2));
    execute(handle(), plan, uids, at, workspace_.get());
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
      reject(s, causal, std::string(pass) == "forward",
             std::string("its first ") + pass + " failed: " + e.what());
      return false;
    }
  }

  // The first backward of a shape, run once more: false where the two
  // dqkv differ in any bit (the pass then runs fused from now on).
  template <typename Run>
  bool backward_repeats(const HeadShape& s, bool causal, Run run, const float* dqkv,
                        const std::uint16_t* dqkv_bf16) {
    const std::vector<float> first = download(dqkv, dqkv_bf16, qkv_values(s));
    run();
    const std::vector<float> second = download(dqkv, dqkv_bf16, qkv_values(s));
    if (std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0) return true;
    reject(s, causal, false, "its backward is not deterministic: two runs differ");
    return false;
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
    reject(s, causal, true,
           differs("forward", "o " + gap_text(gap_o) + ", lse " + gap_text(gap_lse)));
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
    reject(s, causal, false, differs("backward", "dqkv " + gap_text(gap)));
    return false;
  }

  std::vector<float> download(const float* p, const std::uint16_t* copy, std::size_t n) {
    return device_values(backend_, p, copy, n);
  }
  std::vector<float> download(const float* p, std::size_t n) { return download(p, nullptr, n); }
  std::vector<float> download(const DeviceBuffer<float>& b) { return download(b.get(), b.size()); }

  // The shape's forward (else backward) runs on the fused kernels from now
  // on, said once per table and pass.
  void reject(const HeadShape& s, bool causal, bool forward, const std::string& why) {
    SdpaPlans& plans = plans_[ShapeKey{s.batch, s.tokens, s.heads, s.head_dim, causal}];
    (forward ? plans.forward : plans.backward).reset();
    note_fallback(s, causal, forward ? kForwardPass : kBackwardPass, why);
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

  // The plans of this shape, made on first sight, each pass apart (a
  // refused pass is null and said once; both graphs are always tried).
  SdpaPlans& plans_for(const HeadShape& s, bool causal) {
    const ShapeKey key{s.batch, s.tokens, s.heads, s.head_dim, causal};
    const auto known = plans_.find(key);
    if (known != plans_.end()) return known->second;
    SdpaPlans& made = plans_[key];
    const SdpaShape shape{s.batch, s.heads, s.tokens, s.head_dim, causal};
    std::string why;  // the refusals, said in one line
    int refused = 0;
    made.forward = plan_or_refusal("forward", &why, &refused, kForwardPass, [&] {
      return sdpa_forward_plan(handle(), sdpa_forward_graph(handle(), shape));
    });
    made.backward = plan_or_refusal("backward", &why, &refused, kBackwardPass, [&] {
      return sdpa_backward_plan(handle(), sdpa_backward_graph(handle(), shape));
    });
    if (refused) note_fallback(s, causal, refused, why);
    reserve_workspace(made);
    return made;
  }
  // A pass's plan, or null with cuDNN's reason added to *why and the pass
  // to *refused.
  template <typename Make>
  static std::unique_ptr<ExecutionPlan> plan_or_refusal(const char* pass, std::string* why,
                                                        int* refused, int bit, Make make) {
    try {
      return std::make_unique<ExecutionPlan>(make());
    } catch (const std::exception& e) {  // CudnnRefusal, or no handle on this machine
      *why += std::string(why->empty() ? "" : "; ") + "its " + pass + ": " + e.what();
      *refused |= bit;
      return nullptr;
    }
  }

  // The staging and the workspace, counted as the backend's DeviceBuffers
  // are (the memory line), growing only with a shape's plans (the
  // workspace) and in staging().
  std::size_t staged_bytes() const {
    return qkv16_.bytes() + dqkv16_.bytes() + o16_.bytes() + do16_.bytes() + workspace_.bytes();
  }
  void reserve_workspace(const SdpaPlans& p) {
    std::int64_t work = 1;
    for (const auto* plan : {p.forward.get(), p.backward.get()})
      if (plan) work = std::max(work, plan->workspace_bytes);
    const std::size_t before = staged_bytes();
    workspace_.reserve(static_cast<std::size_t>(work), launch_.stream);
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

  // One line on stderr for the passes (kForwardPass, kBackwardPass bits),
  // the first time only for each pass of this table.
  void note_fallback(const HeadShape& s, bool causal, int passes, const std::string& why) {
    if ((noted_ & passes) == passes) return;
    noted_ |= passes;
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
  std::map<ShapeKey, SdpaPlans> plans_;
  int noted_ = 0;  // the passes said (kForwardPass, kBackwardPass)
  GrowingBuffer qkv16_, dqkv16_, o16_, do16_, workspace_;
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
