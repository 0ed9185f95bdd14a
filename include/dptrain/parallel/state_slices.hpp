// Implements: moving optimizer state kept in slices (one per rank, the
// --shard-optimizer strategy) between the ranks and rank 0, which reads and
// writes checkpoints: what a strategy's state_slices() asks the checkpoint
// code to do. Writing gathers it tensor by tensor, so that rank 0 never
// holds more of it than its own slice and one tensor; the file has the
// layout of a run whose every rank keeps the whole state. Restoring sends
// each rank its slice of the state rank 0 reads, tensor by tensor too.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <mpi.h>

#include "dptrain/backends/backend.hpp"
#include "dptrain/model/layer.hpp"

namespace dptrain {

class StateSliceGather {
 public:
  // states: this rank's slices (device), one per state array, each of
  // bounds[rank + 1] - bounds[rank] floats; bounds: slice_bounds.
  StateSliceGather(MPI_Comm world, Backend& be, const std::vector<ParamInfo>& layout,
                     std::vector<std::size_t> bounds, std::vector<float*> states);

  // Rank 0: tensor p of state array s into out (p.count floats): its own
  // part from its slice, the others' from their owners. Called for every
  // (state array, tensor) in that order, as write_checkpoint does.
  void fetch(std::size_t s, const ParamInfo& p, float* out);
  // Rank 0, after a failed write: receives every part fetch did not, so no
  // owner is left waiting to send.
  void drain();
  // Every other rank: sends its part of every (state array, tensor) to
  // rank 0, in fetch order.
  void serve();

 private:
  // The part of tensor p that rank r owns, as arena offsets [lo, hi).
  std::pair<std::size_t, std::size_t> part(const ParamInfo& p, std::size_t r) const;
  void receive(std::size_t s, const ParamInfo& p, float* out);

  MPI_Comm world_;
  Backend& be_;
  const std::vector<ParamInfo>& layout_;
  std::vector<std::size_t> bounds_;
  std::vector<float*> states_;
  int rank_ = 0, size_ = 1;
  std::size_t next_ = 0;  // fetch order: state array * tensors + tensor
};

// Rank 0's source of whole tensors when restoring: tensor p of state array
// s into out (p.count floats), e.g. read from a checkpoint on demand.
using StateTensorRead = std::function<void(std::size_t s, const ParamInfo& p, float* out)>;

// Restoring: each rank's slice of every state array into its own slices
// (`states`, device), tensor by tensor from rank 0's `read` (rank 0 only),
// so that no rank ever holds more than its slices and one tensor. A read
// that throws on rank 0 leaves nobody waiting: the owners get zeros for
// that tensor and every later one, and rank 0 throws the first error at
// the end. Collective over world; run it inside agree() so that every rank
// then exits with that error's code.
void scatter_state_slices(MPI_Comm world, Backend& be, const std::vector<ParamInfo>& layout,
                          const std::vector<std::size_t>& bounds,
                          const std::vector<float*>& states, const StateTensorRead& read);

}  // namespace dptrain
