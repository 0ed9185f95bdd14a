// Implements: strided batched GEMMs on oneDNN matmul primitives (see
// batched_gemm.hpp).
#include "backends/cpu/onednn/batched_gemm.hpp"

#include "backends/cpu/onednn/engine.hpp"

namespace dptrain::onednn {
namespace {

using dnnl::memory;

// op(X_b) is logically [rows, cols] for each of `batch` matrices stored
// row-major with row stride ld (transposed when `trans`), `stride` apart.
memory::desc operand(int batch, int rows, int cols, int ld, std::size_t stride, bool trans,
                     memory::data_type type) {
  const auto s = static_cast<memory::dim>(stride);
  const memory::dims strides = trans ? memory::dims{s, 1, ld} : memory::dims{s, ld, 1};
  return memory::desc({batch, rows, cols}, type, strides);
}

}  // namespace

BatchedGemm::Entry& BatchedGemm::entry(const Key& key) {
  auto it = primitives_.find(key);
  if (it != primitives_.end()) return it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch, alpha, beta] = key;
  const dnnl::engine& eng = cpu_engine();
  const memory::data_type f32 = memory::data_type::f32;
  const memory::desc a_md = operand(batch, m, k, lda, sa, ta, f32);
  const memory::desc b_md = operand(batch, k, n, ldb, sb, tb, f32);
  const memory::desc c_md = operand(batch, m, n, ldc, sc, false, f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (bf16_) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
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
  e.args = {{DNNL_ARG_SRC, e.a.get()},
            {DNNL_ARG_WEIGHTS, e.b.get()},
            {DNNL_ARG_DST, e.c.get()},
            {DNNL_ARG_SCRATCHPAD, e.scratchpad.get()}};
  return primitives_.emplace(key, std::move(e)).first->second;
}

void BatchedGemm::run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      int lda, std::size_t stride_a, const float* b, int ldb, std::size_t stride_b,
                      float beta, float* c, int ldc, std::size_t stride_c, int batch) {
  Entry& e = entry({trans_a, trans_b, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                    alpha, beta});
  e.a.set_data_handle(const_cast<float*>(a));
  e.b.set_data_handle(const_cast<float*>(b));
  e.c.set_data_handle(c);
  execute(e.matmul, e.args);
  cpu_stream().wait();
}

}  // namespace dptrain::onednn
