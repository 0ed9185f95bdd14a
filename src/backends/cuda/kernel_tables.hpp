// Implements: the factories of the CUDA backend's kernel tables, one per
// family, each defined in its own file of src/backends/cuda/ over the launchers of
// kernels.hpp (internal header). A table launches on l.stream, the backend's
// compute stream, which must outlive it.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/kernels.hpp"
#include "dptrain/backends/backend.hpp"
#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain::cuda {

// Each in the file of its family's name: activation_kernels.cpp, ...
std::unique_ptr<ActivationKernels> make_activation_kernels(const Launch& l);
std::unique_ptr<DenseKernels> make_dense_kernels(const Launch& l);
std::unique_ptr<LossKernels> make_loss_kernels(const Launch& l);
std::unique_ptr<OptimizerKernels> make_optimizer_kernels(const Launch& l);
std::unique_ptr<NormKernels> make_norm_kernels(const Launch& l);
std::unique_ptr<DropoutKernels> make_dropout_kernels(const Launch& l);
std::unique_ptr<AugmentKernels> make_augment_kernels(const Launch& l);
std::unique_ptr<SequenceKernels> make_sequence_kernels(const Launch& l);
// Convolution and pooling in the backend's precision: on cuDNN
// (cudnn/spatial_kernels.cpp), or, in a build without it, plans that throw
// a usage error (no_cudnn/spatial_kernels.cpp).
std::unique_ptr<SpatialKernels> make_spatial_kernels(const Launch& l, Precision p);
// The library behind them, for the start-up summary: "cuDNN 9.19.0" or "no cuDNN".
std::string spatial_library();

}  // namespace dptrain::cuda
