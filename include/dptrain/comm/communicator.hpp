// Implements: the collective interface among ranks (docs/design.md section 1).
// Buffers live in the memory of the rank's Backend (host for mpi, device for
// nccl). One call per arena or bucket, never per tensor.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <mpi.h>

namespace dptrain {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi" or "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place sum over all ranks of n floats.
  virtual void allreduce_sum(float* buf, std::size_t n) = 0;
  // In-place sum over all ranks of n doubles in HOST memory, blocking: a
  // step's few scalars (a strategy's NaN/Inf count and squared norm). Every
  // rank gets the same bits.
  virtual void allreduce_host_sum(double* values, std::size_t n) = 0;

  // --- non-blocking sums, for gradient buckets ---
  // Starts an in-place sum of buf[0, n) over all ranks, ordered after the
  // compute work issued so far. buf must not be touched until wait_all().
  // Every rank starts the same sequence of sums. Returns the ticket of this
  // sum (0, 1, ... since the last wait_all()). The default is blocking.
  virtual int start_allreduce_sum(float* buf, std::size_t n) {
    allreduce_sum(buf, n);
    return started_++;
  }
  // Lets started sums advance without blocking; cheap enough to call
  // between layers. MPI moves non-blocking collectives only inside MPI
  // calls, so this is what overlaps them with compute on the CPU.
  virtual void progress() {}
  // Whether the sum with this ticket has completed, as far as progress()
  // has seen (a device backend may only know at wait_all()).
  virtual bool done(int ticket) const { return ticket < started_; }
  // Completes every started sum: afterwards the results are visible to the
  // host (MPI) or to all later work on the compute stream (NCCL).
  virtual void wait_all() { started_ = 0; }

  // --- over slices: P pieces of one arena (the sliced optimizer state of
  // --shard-optimizer, ZeRO stage 1) ---
  // `bounds` holds size() + 1 offsets into buf, bounds[0] = 0, ascending:
  // piece r is buf[bounds[r], bounds[r+1]) (pieces may be empty).
  //
  // Starts an in-place sum over all ranks of which each rank receives only
  // its own piece: afterwards piece rank() of buf holds the sum, the rest of
  // buf is unspecified. Tickets, progress() and wait_all() as for
  // start_allreduce_sum, with which it may be mixed. Each element is summed
  // exactly as allreduce_sum sums it, so the piece matches an all-reduce of
  // the same buffers. The default is an all-reduce (correct, more traffic).
  virtual int start_reduce_scatter_sum(float* buf, const std::size_t* bounds) {
    return start_allreduce_sum(buf, bounds[size()]);
  }
  // In place: piece r of rank r's buf is copied into every rank's buf
  // (blocking on the host for mpi; ordered on the compute stream for nccl).
  // The default broadcasts the pieces one by one.
  virtual void allgather(float* buf, const std::size_t* bounds) {
    for (int r = 0; r < size(); ++r)
      if (bounds[r + 1] > bounds[r])
        broadcast(buf + bounds[r], (bounds[r + 1] - bounds[r]) * sizeof(float), r);
  }

  // The same gather started, to run while the caller computes:
  // finish_allgather() completes it (at most one is outstanding; a second
  // start finishes the first). The buffer must not be read or written in
  // between. The default gathers at once.
  virtual void start_allgather(float* buf, const std::size_t* bounds) { allgather(buf, bounds); }
  virtual void finish_allgather() {}

  // Broadcast bytes from root, in place.
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Tears the communicator down so that blocked or later calls return
  // instead of hanging; callable from any thread (the watchdog). MPI has no
  // such call (the job is aborted instead): a no-op there.
  virtual void abort() noexcept {}
  // An error the transport found asynchronously (NCCL), "" when none.
  virtual std::string async_error() const { return {}; }

 private:
  int started_ = 0;  // tickets of the blocking default
};

// The MPI communicator a backend's own communicator spans, as
// Backend::make_communicator takes it (dptrain/backends/backend.hpp
// declares it only, and so needs no MPI):
//   be.make_communicator(MpiCommHandle{MPI_COMM_WORLD})
struct MpiCommHandle {
  MPI_Comm comm;
};

// MPI over host memory; comm is duplicated so our traffic never mixes with
// anything else on it. What the CPU backend's make_communicator returns;
// tests and tools use it directly.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

}  // namespace dptrain
