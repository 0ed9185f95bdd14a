// Implements: the CUDA sequence kernel table — embeddings, positions, layer
// norm, the head shuffles of attention, its softmax, and images read as
// sequences, each one launcher of sequence.cu (layer norm's of
// layer_norm.cu) on the compute stream. Layer norm's per-chunk partial
// sums live in a workspace each ln layer allocates when it is built; the
// table holds the counts of the chunk blocks arrived, which every ln layer
// shares (their kernels run one after another on the stream, and each
// launch leaves the counts at zero).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/scratch.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"

namespace dptrain::cuda {
namespace {

constexpr int kInitialWidth = 65536;  // layer norms this wide never grow the counts

class CudaSequenceKernels final : public SequenceKernels {
 public:
  explicit CudaSequenceKernels(const Launch& l)
      : launch_(l), arrivals_(l.stream, layer_norm_column_blocks(kInitialWidth)) {}

  void embed(const std::int32_t* ids, const float* table, int rows, int dim, float* y) override {
    cuda::embed(launch_, ids, table, rows, dim, y);
  }
  void embed_grad(const std::int32_t* ids, const float* dy, int rows, int vocab, int dim,
                  float* dtable) override {
    cuda::embed_grad(launch_, ids, dy, rows, vocab, dim, dtable);
  }
  void add_positions(const float* x, const float* pos, int batch, int tokens, int dim,
                     float* y) override {
    cuda::add_positions(launch_, x, pos, batch, tokens, dim, y);
  }
  void position_grad(const float* dy, int batch, int tokens, int dim, float* dpos) override {
    cuda::position_grad(launch_, dy, batch, tokens, dim, dpos);
  }
  void layer_norm(const float* x, const float* weight, const float* bias, int rows, int dim,
                  float eps, float* y, float* mean, float* rstd, std::uint16_t* y_bf16) override {
    cuda::layer_norm(launch_, x, weight, bias, rows, dim, eps, y, mean, rstd, y_bf16);
  }
  void layer_norm_grad(const float* x, const float* dy, const float* weight, const float* mean,
                       const float* rstd, int rows, int dim, float* dx, const float* add,
                       std::uint16_t* dx_bf16) override {
    cuda::layer_norm_grad(launch_, x, dy, weight, mean, rstd, rows, dim, dx, add, dx_bf16);
  }
  // Partial sums per chunk of rows: two per column and chunk.
  std::size_t layer_norm_workspace(int rows, int dim) const override {
    return 2 * static_cast<std::size_t>(layer_norm_chunks(rows).count) *
           static_cast<std::size_t>(dim);
  }
  void layer_norm_param_grad(const float* x, const float* dy, const float* mean, const float* rstd,
                             int rows, int dim, float* dweight, float* dbias,
                             float* workspace) override {
    cuda::layer_norm_param_grad(launch_, x, dy, mean, rstd, rows, dim, workspace,
                                arrivals_.get(layer_norm_column_blocks(dim)), dweight, dbias);
  }
  void split_qkv(const float* qkv, const HeadShape& s, float* q, float* k, float* v) override {
    move_qkv(launch_, const_cast<float*>(qkv), s, q, k, v, true);
  }
  void join_qkv(const float* q, const float* k, const float* v, const HeadShape& s,
                float* qkv) override {
    move_qkv(launch_, qkv, s, const_cast<float*>(q), const_cast<float*>(k), const_cast<float*>(v),
             false);
  }
  void merge_heads(const float* heads, const HeadShape& s, float* merged) override {
    move_heads(launch_, merged, s, const_cast<float*>(heads), false);
  }
  void split_heads(const float* merged, const HeadShape& s, float* heads) override {
    move_heads(launch_, const_cast<float*>(merged), s, heads, true);
  }
  void attention_softmax(const float* scores, const HeadShape& s, float scale, bool causal,
                         float* p) override {
    cuda::attention_softmax(launch_, scores, s, scale, causal, p);
  }
  void attention_softmax_grad(const float* p, const float* dp, const HeadShape& s, float scale,
                              float* dscores) override {
    cuda::attention_softmax_grad(launch_, p, dp, s, scale, dscores);
  }
  void channels_last(const float* x, int batch, int channels, int length, float* y) override {
    transpose(launch_, x, batch, channels, length, y);
  }
  void channels_first(const float* x, int batch, int channels, int length, float* y) override {
    transpose(launch_, x, batch, length, channels, y);
  }
  void mean_positions(const float* x, int batch, int tokens, int dim, float* y) override {
    cuda::mean_positions(launch_, x, batch, tokens, dim, y);
  }
  void mean_positions_grad(const float* dy, int batch, int tokens, int dim, float* dx) override {
    cuda::mean_positions_grad(launch_, dy, batch, tokens, dim, dx);
  }

 private:
  Launch launch_;
  ArrivalCounts arrivals_;  // one a column block of layer norm's parameter gradients
};

}  // namespace

template <>
std::unique_ptr<SequenceKernels> make_kernels<SequenceKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaSequenceKernels>(l);
}

}  // namespace dptrain::cuda
