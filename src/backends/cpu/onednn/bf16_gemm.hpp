// Implements: --precision bf16 GEMMs on the CPU, as on CUDA: the fp32
// operands are rounded to bf16 (nearest even) into buffers that grow only,
// then a oneDNN matmul primitive multiplies them with fp32 accumulation into
// the fp32 C. One primitive per shape, created on first use and reused, so
// a warmed-up step creates none. Runs only where oneDNN has bf16
// instructions (engine.hpp: bf16_missing).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace dptrain::onednn {

// Round-to-nearest-even fp32 -> bf16 (NaN stays NaN), n elements.
void to_bf16(const float* x, std::uint16_t* y, std::size_t n);

class Bf16Gemm {
 public:
  // Row-major C[m,n] = alpha * op(A) op(B) + beta * C, m, n, k >= 1.
  void run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

 private:
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, float, float>;
  struct Entry {
    dnnl::matmul matmul;
    dnnl::memory a, b, c, scratchpad;  // data handles set per call
    std::vector<std::uint8_t> scratchpad_bytes;
  };
  Entry& entry(const Key& key);

  std::map<Key, Entry> primitives_;
  std::vector<std::uint16_t> a16_, b16_;
};

}  // namespace dptrain::onednn
