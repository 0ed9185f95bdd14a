// Implements: Backend::gemm_batched on the CPU: strided batched GEMMs (the
// products of attention over N·H heads) as one oneDNN matmul primitive with
// a batch dimension, made on first use of a shape and reused, so a
// warmed-up step creates none. fp32 in and out (bf16 inputs on bf16 CPUs).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace dptrain::onednn {

class BatchedGemm {
 public:
  // bf16: round the inputs to bf16 inside the primitive (fp32 accumulation).
  explicit BatchedGemm(bool bf16 = false) : bf16_(bf16) {}
  // For b < batch: C_b[m,n] = alpha op(A_b) op(B_b) + beta C_b, row-major,
  // X_b = x + b·stride_x; m, n, k, batch >= 1.
  void run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           std::size_t stride_a, const float* b, int ldb, std::size_t stride_b, float beta,
           float* c, int ldc, std::size_t stride_c, int batch);
  std::size_t primitives() const { return primitives_.size(); }

 private:
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, std::size_t, std::size_t,
                         std::size_t, int, float, float>;
  struct Entry {
    dnnl::matmul matmul;
    dnnl::memory a, b, c, scratchpad;  // data handles set per call
    std::vector<std::uint8_t> scratchpad_bytes;
    std::vector<dnnl_exec_arg_t> args;  // made once: a call allocates nothing of ours
  };
  Entry& entry(const Key& key);

  bool bf16_;
  std::map<Key, Entry> primitives_;
};

}  // namespace dptrain::onednn
