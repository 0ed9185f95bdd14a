// Implements: the reduce-scatter and all-gather over pieces of the NCCL
// communicator (nccl_comm.cpp; internal to a CUDA build). A call sums each
// piece onto its owner, or sends each owner's piece to every rank, where
// the pieces (bounds: P + 1 offsets into one buffer) may be uneven or
// empty, which NCCL's own ncclReduceScatter and ncclAllGather do not take.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "backends/cuda/cuda_handles.hpp"

namespace dptrain {

class NcclPieces {
 public:
  // Rank `rank` of `size`; every collective is queued on `stream`, after
  // whatever that stream already waits for.
  NcclPieces(int rank, int size, cudaStream_t stream) : rank_(rank), size_(size), stream_(stream) {}

  // Piece r of buf, summed over the ranks, into piece r of rank r's buf
  // (the other ranks' pieces left as they were, or summed partly).
  void reduce_scatter(float* buf, const std::size_t* bounds, ncclComm_t c);
  // Piece r of rank r's buf into piece r of every rank's buf; buf is
  // written within the pieces only.
  void allgather(float* buf, const std::size_t* bounds, ncclComm_t c);

 private:
  // Calls piece(offset, count, owner) for every non-empty piece of bounds
  // inside one NCCL group.
  template <typename Piece>
  void grouped(const std::size_t* bounds, Piece piece);
  std::size_t window(std::size_t m) const;
  void flat_reduce_scatter(float* buf, const std::size_t* bounds, ncclComm_t c);
  void flat_allgather(float* buf, const std::size_t* bounds, ncclComm_t c);
  float* staging_for(std::size_t floats);
  void copy_on_stream(float* dst, const float* src, std::size_t n);

  int rank_, size_;
  cudaStream_t stream_;
  cuda::DeviceMemory staging_;  // the flat paths' padded pieces (staging_for)
};

}  // namespace dptrain
