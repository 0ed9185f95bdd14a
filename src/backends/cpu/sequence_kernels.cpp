// Implements: the CPU sequence kernels (sequence_kernels.hpp) — single passes
// over rows, parallel over rows (or, for sums over rows, over columns, so
// that every sum keeps its order whatever the thread count). Layer norm and
// the attention softmax are the vector row kernels of row_kernels.hpp, their
// statistics accumulated in double: these loops are the reference the CUDA
// kernels are tested against.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/kernel_factory.hpp"
#include "backends/cpu/row_kernels.hpp"
#include "dptrain/backends/kernels/convert_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain {
namespace {

using std::size_t;

// Below this many values a parallel region costs more than it saves.
constexpr size_t kParallelValues = size_t(1) << 15;

size_t at(int a, int b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

// Items [begin, end) of `count` (rows, or columns) for this thread of the
// team. Split by columns, sums over rows run per column in row order; split
// by rows, each row's statistics are its own: the same bits for any team
// size.
void thread_range(int count, int& begin, int& end) {
  const int threads = omp_get_num_threads(), me = omp_get_thread_num();
  const int per = (count + threads - 1) / threads;
  begin = std::min(count, me * per);
  end = std::min(count, begin + per);
}

class CpuSequenceKernels final : public SequenceKernels {
 public:
  void embed(const std::int32_t* ids, const float* table, int rows, int dim, float* y) override {
#pragma omp parallel for schedule(static) if (at(rows, dim) > kParallelValues)
    for (int r = 0; r < rows; ++r)
      std::memcpy(y + at(r, dim), table + at(ids[r], dim), at(1, dim) * sizeof(float));
  }

  void embed_grad(const std::int32_t* ids, const float* dy, int rows, int vocab, int dim,
                  float* dtable) override {
    std::fill_n(dtable, at(vocab, dim), 0.0f);
#pragma omp parallel if (at(rows, dim) > kParallelValues)
    {
      int c0, c1;
      thread_range(dim, c0, c1);
      for (int r = 0; r < rows; ++r) {
        const float* g = dy + at(r, dim);
        float* d = dtable + at(ids[r], dim);
        for (int c = c0; c < c1; ++c) d[c] += g[c];
      }
    }
  }

  void add_positions(const float* x, const float* pos, int batch, int tokens, int dim,
                     float* y) override {
    const size_t per = at(tokens, dim);
#pragma omp parallel for schedule(static) if (at(batch, int(per)) > kParallelValues)
    for (int n = 0; n < batch; ++n)
      for (size_t i = 0; i < per; ++i) y[at(n, 1) * per + i] = x[at(n, 1) * per + i] + pos[i];
  }

  void position_grad(const float* dy, int batch, int tokens, int dim, float* dpos) override {
    const int per = tokens * dim;
#pragma omp parallel if (at(batch, per) > kParallelValues)
    {
      int c0, c1;
      thread_range(per, c0, c1);
      for (int c = c0; c < c1; ++c) dpos[c] = 0.0f;
      for (int n = 0; n < batch; ++n)
        for (int c = c0; c < c1; ++c) dpos[c] += dy[at(n, per) + static_cast<size_t>(c)];
    }
  }

  // y_bf16 is rounded after the rows (the CPU's own GEMMs round inside, so
  // training never asks for it here).
  // y null (the copy alone; training on the CPU never asks) goes through
  // a buffer of its own.
  void layer_norm(const float* x, const float* weight, const float* bias, int rows, int dim,
                  float eps, float* y, float* mean, float* rstd, std::uint16_t* y_bf16) override {
    std::vector<float> own;
    if (!y) {
      own.resize(at(rows, dim));
      y = own.data();
    }
#pragma omp parallel if (at(rows, dim) > kParallelValues)
    {
      int r0, r1;
      thread_range(rows, r0, r1);
      cpu_rows::layer_norm(x, weight, bias, r0, r1, dim, eps, y, mean, rstd);
    }
    if (y_bf16)
      for (std::size_t i = 0, n = at(rows, dim); i < n; ++i) y_bf16[i] = bf16_bits(y[i]);
  }

  void layer_norm_grad(const float* x, const float* dy, const float* weight, const float* mean,
                       const float* rstd, int rows, int dim, float* dx, const float* add,
                       std::uint16_t* dx_bf16) override {
#pragma omp parallel if (at(rows, dim) > kParallelValues)
    {
      int r0, r1;
      thread_range(rows, r0, r1);
      cpu_rows::layer_norm_grad(x, dy, weight, mean, rstd, r0, r1, dim, dx, add, dx_bf16);
    }
  }

  std::size_t layer_norm_workspace(int, int) const override { return 0; }

  void layer_norm_param_grad(const float* x, const float* dy, const float* mean, const float* rstd,
                             int rows, int dim, float* dweight, float* dbias, float*) override {
#pragma omp parallel if (at(rows, dim) > kParallelValues)
    {
      int c0, c1;
      thread_range(dim, c0, c1);
      cpu_rows::layer_norm_param_grad(x, dy, mean, rstd, rows, dim, c0, c1, dweight, dbias);
    }
  }

  void split_qkv(const float* qkv, const HeadShape& s, float* q, float* k, float* v) override {
    move_qkv(const_cast<float*>(qkv), s, q, k, v, true);
  }
  void join_qkv(const float* q, const float* k, const float* v, const HeadShape& s,
                float* qkv) override {
    move_qkv(qkv, s, const_cast<float*>(q), const_cast<float*>(k), const_cast<float*>(v), false);
  }
  void merge_heads(const float* heads, const HeadShape& s, float* merged) override {
    move_heads(merged, s, const_cast<float*>(heads), false);
  }
  void split_heads(const float* merged, const HeadShape& s, float* heads) override {
    move_heads(const_cast<float*>(merged), s, heads, true);
  }

  void attention_softmax(const float* scores, const HeadShape& s, float scale, bool causal,
                         float* p) override {
    const int rows = s.batch * s.heads * s.tokens, t = s.tokens;
#pragma omp parallel if (at(rows, t) > kParallelValues)
    {
      int r0, r1;
      thread_range(rows, r0, r1);
      cpu_rows::attention_softmax(scores, r0, r1, t, scale, causal, p);
    }
  }

  void attention_softmax_grad(const float* p, const float* dp, const HeadShape& s, float scale,
                              float* dscores) override {
    const int rows = s.batch * s.heads * s.tokens, t = s.tokens;
#pragma omp parallel if (at(rows, t) > kParallelValues)
    {
      int r0, r1;
      thread_range(rows, r0, r1);
      cpu_rows::attention_softmax_grad(p, dp, r0, r1, t, scale, dscores);
    }
  }

  void channels_last(const float* x, int batch, int channels, int length, float* y) override {
    transpose_rows(x, batch, channels, length, y);
  }
  void channels_first(const float* x, int batch, int channels, int length, float* y) override {
    transpose_rows(x, batch, length, channels, y);
  }

  void mean_positions(const float* x, int batch, int tokens, int dim, float* y) override {
#pragma omp parallel for schedule(static) if (at(batch * tokens, dim) > kParallelValues)
    for (int n = 0; n < batch; ++n) {
      float* out = y + at(n, dim);
      for (int c = 0; c < dim; ++c) {
        double sum = 0.0;
        for (int t = 0; t < tokens; ++t) sum += x[at(n * tokens + t, dim) + static_cast<size_t>(c)];
        out[c] = static_cast<float>(sum / tokens);
      }
    }
  }

  void mean_positions_grad(const float* dy, int batch, int tokens, int dim, float* dx) override {
    const float inv = 1.0f / static_cast<float>(tokens);
#pragma omp parallel for schedule(static) if (at(batch * tokens, dim) > kParallelValues)
    for (int n = 0; n < batch; ++n)
      for (int t = 0; t < tokens; ++t)
        for (int c = 0; c < dim; ++c)
          dx[at(n * tokens + t, dim) + static_cast<size_t>(c)] = dy[at(n, dim) + static_cast<size_t>(c)] * inv;
  }

 private:
  // Copies between qkv [N, T, 3, H, hd] and q, k, v [N, H, T, hd], in the
  // direction `split` says.
  static void move_qkv(float* qkv, const HeadShape& s, float* q, float* k, float* v, bool split) {
    const int d = s.heads * s.head_dim;
    const size_t bytes = at(1, s.head_dim) * sizeof(float);
    float* parts[3] = {q, k, v};
#pragma omp parallel for collapse(2) schedule(static) if (at(s.batch * s.tokens, 3 * d) > kParallelValues)
    for (int n = 0; n < s.batch; ++n)
      for (int h = 0; h < s.heads; ++h)
        for (int t = 0; t < s.tokens; ++t)
          for (int w = 0; w < 3; ++w) {
            float* packed = qkv + at(n * s.tokens + t, 3 * d) + at(w, d) + at(h, s.head_dim);
            float* head = parts[w] + at((n * s.heads + h) * s.tokens + t, s.head_dim);
            if (split) std::memcpy(head, packed, bytes);
            else std::memcpy(packed, head, bytes);
          }
  }

  // Copies between merged [N, T, H, hd] and heads [N, H, T, hd].
  static void move_heads(float* merged, const HeadShape& s, float* heads, bool split) {
    const int d = s.heads * s.head_dim;
    const size_t bytes = at(1, s.head_dim) * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static) if (at(s.batch * s.tokens, d) > kParallelValues)
    for (int n = 0; n < s.batch; ++n)
      for (int h = 0; h < s.heads; ++h)
        for (int t = 0; t < s.tokens; ++t) {
          float* m = merged + at(n * s.tokens + t, d) + at(h, s.head_dim);
          float* hd = heads + at((n * s.heads + h) * s.tokens + t, s.head_dim);
          if (split) std::memcpy(hd, m, bytes);
          else std::memcpy(m, hd, bytes);
        }
  }

  // y[n] = x[n]ᵀ for `batch` row-major [a, b] matrices.
  static void transpose_rows(const float* x, int batch, int a, int b, float* y) {
#pragma omp parallel for schedule(static) if (at(batch * a, b) > kParallelValues)
    for (int n = 0; n < batch; ++n) {
      const float* xn = x + at(n, a * b);
      float* yn = y + at(n, a * b);
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < b; ++j) yn[at(j, a) + static_cast<size_t>(i)] = xn[at(i, b) + static_cast<size_t>(j)];
    }
  }
};

}  // namespace

template <>
std::unique_ptr<SequenceKernels> make_cpu_kernels<SequenceKernels>() {
  return std::make_unique<CpuSequenceKernels>();
}

}  // namespace dptrain
