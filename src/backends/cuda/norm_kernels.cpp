// Implements: the CUDA normalization kernel table — batch norm as custom
// kernels on the compute stream (norm.cu), with the device scratch of the
// per-chunk partial sums and the per-channel arrival counts grown once to
// the largest shape. Not cuDNN's
// batch-norm API: its training forward computes the batch statistics inside
// one call, with no point where `bn` could sum them over the replicas of
// the global batch (docs/gpu.md).
#include <algorithm>
#include <cstddef>
#include <memory>

#include "backends/cuda/kernel_factory.hpp"
#include "backends/cuda/scratch.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"

namespace dptrain::cuda {
namespace {

// Partials for up to 65536 (channel, chunk) pairs, e.g. 64 channels of
// 8 million values each, and counts for 4096 channels, before the scratch
// has to grow.
constexpr std::size_t kInitialPartials = 2 * 65536;
constexpr std::size_t kInitialChannels = 4096;

class CudaNormKernels final : public NormKernels {
 public:
  explicit CudaNormKernels(const Launch& l)
      : launch_(l),
        partials_(l.stream, kInitialPartials * sizeof(double)),
        arrivals_(l.stream, kInitialChannels) {}

  void batch_sums(const float* x, const NormShape& s, const float* shift, float* sums) override {
    norm_batch_sums(launch_, x, s, shift, sums, scratch(s));
  }
  void batch_sums_and_stats(const float* x, const NormShape& s, const float* shift,
                            double count, float eps, float momentum, float* sums, float* mean,
                            float* invstd, float* running_mean, float* running_var) override {
    norm_batch_sums_stats(launch_, x, s, shift, count, eps, momentum, sums, mean, invstd,
                          running_mean, running_var, scratch(s));
  }
  void batch_stats(const float* sums, const float* shift, int channels, double count, float eps,
                   float momentum, float* mean, float* invstd, float* running_mean,
                   float* running_var) override {
    norm_batch_stats(launch_, sums, shift, channels, count, eps, momentum, mean, invstd,
                     running_mean, running_var);
  }
  void inverse_std(const float* var, int channels, float eps, float* invstd) override {
    norm_inverse_std(launch_, var, channels, eps, invstd);
  }
  void normalize(const float* x, const NormShape& s, const float* mean, const float* invstd,
                 const float* weight, const float* bias, bool relu, float* y) override {
    norm_normalize(launch_, x, s, mean, invstd, weight, bias, relu, y);
  }
  void grad_sums(const float* x, const float* gate, const float* dz, const NormShape& s,
                 const float* mean, const float* invstd, float* sums) override {
    norm_grad_sums(launch_, x, gate, dz, s, mean, invstd, sums, scratch(s));
  }
  void input_grad(const float* x, const float* gate, const float* dz, const NormShape& s,
                  const float* mean, const float* invstd, const float* weight, const float* sums,
                  double count, float* dx) override {
    norm_input_grad(launch_, x, gate, dz, s, mean, invstd, weight, sums, count, dx);
  }

 private:
  // One scratch for every bn layer: their kernels run one after another on
  // the stream, and each launch leaves the arrival counts at zero.
  NormScratch scratch(const NormShape& s) {
    return {partials_.get<double>(norm_partials(s)),
            arrivals_.get(static_cast<std::size_t>(std::max(s.channels, 0)))};
  }

  Launch launch_;
  Scratch partials_;
  ArrivalCounts arrivals_;  // one a channel
};

}  // namespace

template <>
std::unique_ptr<NormKernels> make_kernels<NormKernels>(const Launch& l, Precision) {
  return std::make_unique<CudaNormKernels>(l);
}

}  // namespace dptrain::cuda
