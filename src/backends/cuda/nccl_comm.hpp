// Implements: the factory of the NCCL communicator (internal to a CUDA
// build; the CUDA backend's make_communicator is its one caller, so no other
// code needs to know which stream or device it runs on).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "dptrain/comm/communicator.hpp"

namespace dptrain {

// NCCL among the ranks of parent (duplicated; the unique id is sent by
// MPI_Bcast on it), on CUDA device `device`. Collectives are ordered after
// the work queued on `compute` so far, and later work on `compute` sees
// their results; that stream must outlive the communicator.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm parent, cudaStream_t compute,
                                                     int device);

// Sum over the ranks of in[0, n) into out[0, n), ordered like allreduce_sum
// (which is this with in == out). comm must come from make_nccl_communicator.
// For the GPU tests: on one rank an in-place sum moves no data, so only an
// out-of-place one shows whether the ordering between the streams holds.
void nccl_allreduce_sum(Communicator& comm, const float* in, float* out, std::size_t n);

}  // namespace dptrain
