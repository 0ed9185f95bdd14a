// Implements: bf16-input GEMMs on oneDNN matmul primitives (see
// bf16_gemm.hpp).
#include "backends/cpu/onednn/bf16_gemm.hpp"

#include <cstring>

#include "backends/cpu/onednn/engine.hpp"
#include "backends/cpu/vector_clones.hpp"

namespace dptrain::onednn {

using dnnl::memory;

DPT_VECTOR_CLONES
void to_bf16(const float* __restrict x, std::uint16_t* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    y[i] = static_cast<std::uint16_t>(nan ? (bits >> 16) | 0x40u : rounded >> 16);
  }
}

namespace {

// Elements a stored row-major rows x cols matrix with row stride ld spans.
std::size_t stored_elements(int rows, int cols, int ld) {
  return static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld) +
         static_cast<std::size_t>(cols);
}

// op(X) is logically [rows, cols]; X is stored row-major with stride ld,
// transposed when `trans`.
memory::desc operand(int rows, int cols, int ld, bool trans, memory::data_type type) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

}  // namespace

Bf16Gemm::Entry& Bf16Gemm::entry(const Key& key) {
  auto it = primitives_.find(key);
  if (it != primitives_.end()) return it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  const dnnl::engine& eng = cpu_engine();
  const memory::desc a_md = operand(m, k, lda, ta, memory::data_type::bf16);
  const memory::desc b_md = operand(k, n, ldb, tb, memory::data_type::bf16);
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
  Entry e;
  e.matmul = dnnl::matmul(pd);
  e.a = memory(a_md, eng, DNNL_MEMORY_NONE);
  e.b = memory(b_md, eng, DNNL_MEMORY_NONE);
  e.c = memory(c_md, eng, DNNL_MEMORY_NONE);
  e.scratchpad_bytes.resize(pd.scratchpad_desc().get_size());
  e.scratchpad = memory(pd.scratchpad_desc(), eng, e.scratchpad_bytes.data());
  return primitives_.emplace(key, std::move(e)).first->second;
}

void Bf16Gemm::run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  Entry& e = entry({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta});
  const std::size_t a_elems = stored_elements(trans_a ? k : m, trans_a ? m : k, lda);
  const std::size_t b_elems = stored_elements(trans_b ? n : k, trans_b ? k : n, ldb);
  if (a16_.size() < a_elems) a16_.resize(a_elems);
  if (b16_.size() < b_elems) b16_.resize(b_elems);
  to_bf16(a, a16_.data(), a_elems);
  to_bf16(b, b16_.data(), b_elems);
  // The argument memories are made once per shape; only their pointers
  // change from call to call.
  e.a.set_data_handle(a16_.data());
  e.b.set_data_handle(b16_.data());
  e.c.set_data_handle(c);
  e.matmul.execute(cpu_stream(), {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b},
                                  {DNNL_ARG_DST, e.c}, {DNNL_ARG_SCRATCHPAD, e.scratchpad}});
  cpu_stream().wait();
}

}  // namespace dptrain::onednn
