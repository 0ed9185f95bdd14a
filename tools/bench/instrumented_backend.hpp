// Implements: a Backend that forwards every call to another and records
// and times the GEMMs among them (internal to tools/bench): the calls'
// shapes, for the replay of dptrain_gpt_bench's gemm rows, and their host
// or device time. RegistryOf reaches another backend's kernel registry.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bench_rows.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/comm/communicator.hpp"

namespace dptrain::bench {

// The kernel registry of another backend. Backend::kernel_registry() is
// protected; a class derived from Backend may form a pointer to it
// (&RegistryOf::kernel_registry is Backend's virtual member) and call that
// on any Backend.
struct RegistryOf : Backend {
  static KernelRegistry& of(Backend& be) { return (be.*&RegistryOf::kernel_registry)(); }
};

struct GemmCall {
  bool batched, ta, tb;
  int m, n, k;
  float alpha, beta;
  int lda, ldb, ldc;
  std::size_t sa, sb, sc;
  int batch;
  // Backend::gemm_epilogue's (a dense product with its bias or bias
  // gradient), as int; -1: a plain GEMM.
  int epilogue = -1;
  // Operands the caller handed over already rounded to bf16 (GemmOperand):
  // the replay hands its copies over too, so that the bare GEMMs round
  // what the step's GEMMs round, no more.
  bool a_rounded = false, b_rounded = false;
  // An epilogue with bf16 outputs (Backend::gemm_epilogue_bf16: the bf16
  // MLP, the head's bf16 logits).
  bool bf16_out = false;

  auto key() const {
    return std::make_tuple(batched, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, sa, sb, sc, batch,
                           epilogue, a_rounded, b_rounded, bf16_out);
  }
  double flops() const { return 2.0 * m * n * k * batch; }
  // By Backend::GemmEpilogue.
  static constexpr const char* epilogue_names[] = {" +bias", " +bias grad", " +bias +gelu",
                                                   " +gelu grad", " +bias +shortcut", ""};
  static_assert(std::size(epilogue_names) == int(Backend::GemmEpilogue::kNone) + 1,
                "a name for every epilogue");
  // "2048x384x128 N/T" or "64x64x32 N/T x128 (batched)"
  std::string shape() const {
    std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                    (ta ? "T" : "N") + "/" + (tb ? "T" : "N");
    if (batched) s += " x" + std::to_string(batch) + " (batched)";
    if (epilogue >= 0)
      s += epilogue_names[epilogue];
    if (bf16_out) s += " (bf16 out)";
    return s;
  }
};

// Forwards everything to `inner` (so GEMMs run on its library and its
// cached batched primitives, kernels on its kernel registry, on its device).
// While `record`, every GEMM call is appended to `calls`; each call's time
// adds to gemm_ms / batched_ms (the layers row): its host time, or while
// `device_gemms` its device time, between markers 2 to 7 (in pairs, the
// caller keeping 0 and 1), a pair read when it is needed again or at
// settle(), so the host waits for a GEMM only three GEMMs later.
class InstrumentedBackend final : public Backend {
 public:
  explicit InstrumentedBackend(Backend& inner) : inner_(inner) {}

  bool record = false, device_gemms = false;
  std::vector<GemmCall> calls;
  double gemm_ms = 0.0, batched_ms = 0.0;
  long gemm_calls = 0, batched_calls = 0;

  // Adds the device time of every GEMM not yet read (waits for them).
  void settle() {
    for (int p = 0; p < kPairs; ++p) settle_pair(p);
  }

  std::string name() const override { return inner_.name(); }
  std::string placement() const override { return inner_.placement(); }
  std::string gemm_library() const override { return inner_.gemm_library(); }
  BackendCaps caps() const override { return inner_.caps(); }
  std::unique_ptr<Communicator> make_communicator(const MpiCommHandle& world) override {
    return inner_.make_communicator(world);
  }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) noexcept override { inner_.deallocate(p); }
  void* allocate_host(std::size_t bytes) override { return inner_.allocate_host(bytes); }
  void deallocate_host(void* p) noexcept override { inner_.deallocate_host(p); }
  void upload_async(int slot, void* dst, const void* src, std::size_t bytes) override {
    inner_.upload_async(slot, dst, src, bytes);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_to_host(dst, src, bytes);
  }
  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_device(dst, src, bytes);
  }
  void fill(float* x, float value, std::size_t n) override { inner_.fill(x, value, n); }
  void synchronize() override { inner_.synchronize(); }
  void release_slot(int slot) override { inner_.release_slot(slot); }
  void wait_upload(int slot) override { inner_.wait_upload(slot); }
  void sync_upload(int slot) override { inner_.sync_upload(slot); }
  void mark(int i) override { inner_.mark(i); }
  double marker_ms(int from, int to) override { return inner_.marker_ms(from, to); }
  void add(const float* x, float* y, std::size_t n) override { inner_.add(x, y, n); }
  using Backend::sum;
  void sum(const float* a, const float* b, float* y, std::size_t n, std::uint16_t* y16) override {
    inner_.sum(a, b, y, n, y16);
  }
  std::size_t count_nonfinite(const float* x, std::size_t n) override {
    return inner_.count_nonfinite(x, n);
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, GemmOperand a, int lda,
            GemmOperand b, int ldb, float beta, float* c, int ldc) override {
    if (record)
      calls.push_back({false, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 0, 0, 0, 1, -1,
                       a.bf16 != nullptr, b.bf16 != nullptr});
    timed(false, [&] { inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
    ++gemm_calls;
  }
  // A GEMM with its epilogue counts as a GEMM where the library fuses them
  // (the bare GEMMs then include the library's epilogue); elsewhere it is
  // a plain GEMM (recorded and timed by gemm()) and the bias kernels.
  void gemm_epilogue(bool ta, bool tb, int m, int n, int k, GemmOperand a, int lda, GemmOperand b,
                     int ldb, float* c, int ldc, GemmEpilogue e, float* vector,
                     float* aux) override {
    if (!inner_.caps().fused_gemm_epilogues) {
      Backend::gemm_epilogue(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, e, vector, aux);
      return;
    }
    if (record)
      calls.push_back({false, ta, tb, m, n, k, 1.0f, 0.0f, lda, ldb, ldc, 0, 0, 0, 1, int(e),
                       a.bf16 != nullptr, b.bf16 != nullptr});
    timed(false,
          [&] { inner_.gemm_epilogue(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, e, vector, aux); });
    ++gemm_calls;
  }
  void gemm_epilogue_bf16(GemmEpilogue e, bool ta, bool tb, int m, int n, int k, GemmOperand a,
                          int lda, GemmOperand b, int ldb, std::uint16_t* c16, int ldc,
                          std::uint16_t* aux16, const float* vector,
                          const std::uint16_t* vector16, float* scratch, float* scratch2,
                          int scratch_rows) override {
    if (record) {
      calls.push_back({false, ta, tb, m, n, k, 1.0f, 0.0f, lda, ldb, ldc, 0, 0, 0, 1, int(e),
                       a.bf16 != nullptr, b.bf16 != nullptr});
      calls.back().bf16_out = true;
    }
    timed(false, [&] {
      inner_.gemm_epilogue_bf16(e, ta, tb, m, n, k, a, lda, b, ldb, c16, ldc, aux16, vector,
                                vector16, scratch, scratch2, scratch_rows);
    });
    ++gemm_calls;
  }
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                    std::size_t sa, const float* b, int ldb, std::size_t sb, float beta, float* c,
                    int ldc, std::size_t sc, int batch) override {
    if (record) calls.push_back({true, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, sa, sb, sc, batch});
    timed(true, [&] {
      inner_.gemm_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
    });
    ++batched_calls;
  }

 protected:
  KernelRegistry& kernel_registry() override { return RegistryOf::of(inner_); }

 private:
  static constexpr int kPairs = (kMarkers - 2) / 2;
  enum Pending { kNone, kGemm, kBatched };

  template <typename F>
  void timed(bool batched, F&& fn) {
    if (!device_gemms) {
      const auto t0 = Clock::now();
      fn();
      (batched ? batched_ms : gemm_ms) += ms_since(t0);
      return;
    }
    const int p = next_pair_;
    next_pair_ = (next_pair_ + 1) % kPairs;
    settle_pair(p);
    inner_.mark(2 + 2 * p);
    fn();
    inner_.mark(3 + 2 * p);
    pending_[std::size_t(p)] = batched ? kBatched : kGemm;
  }
  void settle_pair(int p) {
    Pending& what = pending_[std::size_t(p)];
    if (what == kNone) return;
    (what == kBatched ? batched_ms : gemm_ms) += inner_.marker_ms(2 + 2 * p, 3 + 2 * p);
    what = kNone;
  }

  Backend& inner_;
  std::array<Pending, kPairs> pending_{};
  int next_pair_ = 0;
};

}  // namespace dptrain::bench
