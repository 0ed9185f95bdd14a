// Implements: the factories of the CPU backend's kernel tables, one per
// family, each defined in its own file of src/backends/cpu/ (internal header).
#pragma once

#include <memory>

#include "dptrain/backends/kernels/activation_kernels.hpp"
#include "dptrain/backends/kernels/augment_kernels.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/dropout_kernels.hpp"
#include "dptrain/backends/kernels/loss_kernels.hpp"
#include "dptrain/backends/kernels/norm_kernels.hpp"
#include "dptrain/backends/kernels/optimizer_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain {

// Each in the file of its family's name: activation_kernels.cpp, ...
std::unique_ptr<ActivationKernels> make_cpu_activation_kernels();
std::unique_ptr<DenseKernels> make_cpu_dense_kernels();
std::unique_ptr<LossKernels> make_cpu_loss_kernels();
std::unique_ptr<OptimizerKernels> make_cpu_optimizer_kernels();
std::unique_ptr<SpatialKernels> make_cpu_spatial_kernels();  // on oneDNN primitives
std::unique_ptr<NormKernels> make_cpu_norm_kernels();
std::unique_ptr<DropoutKernels> make_cpu_dropout_kernels();
std::unique_ptr<AugmentKernels> make_cpu_augment_kernels();
std::unique_ptr<SequenceKernels> make_cpu_sequence_kernels();

}  // namespace dptrain
