// Implements: the NCCL of include/nccl.h over MPI, for the host emulation.
// A collective runs in two parts on its stream: the exchange at once (the
// stream run up to it first, so the data it sends is what the stream's
// waits made ready, and every rank reaches MPI in the order of its host
// code), and the write of the result queued after it (so the data is there
// only for work that waits for the stream). On a GPU the collective reads
// and writes anywhere in its run; this is one ordering of it.
#include <mpi.h>
#include <nccl.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

struct ncclCommEmulated {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

namespace {

thread_local std::string t_last_error;

ncclResult_t refuse(ncclResult_t rc, const std::string& why) {
  t_last_error = why;
  return rc;
}

void free_comm(ncclComm_t c) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
  delete c;
}

ncclResult_t check_buffers(const void* send, const void* recv, ncclComm_t comm) {
  if (!comm) return refuse(ncclInvalidArgument, "no communicator");
  if (!send || !recv || !dptrain_emu::is_device_pointer(send) ||
      !dptrain_emu::is_device_pointer(recv))
    return refuse(ncclInvalidArgument, "a buffer is not device memory");
  return ncclSuccess;
}

// The result is written when the stream gets to it, after the exchange:
// work that reads it without waiting for the stream sees the old data.
template <typename T>
void land_later(cudaStream_t stream, void* recv, std::shared_ptr<std::vector<T>> result) {
  dptrain_emu::enqueue_late(stream, [recv, result] {
    std::memcpy(recv, result->data(), result->size() * sizeof(T));
  });
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "system error (MPI, in the emulation)";
    default: return "internal error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  const std::uint32_t color = std::random_device{}() & 0x3fffffffu;
  std::memcpy(id->internal, &color, sizeof color);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  std::uint32_t color = 0;
  std::memcpy(&color, id.internal, sizeof color);
  auto* c = new ncclCommEmulated;
  if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(color), rank, &c->mpi) != MPI_SUCCESS) {
    delete c;
    return refuse(ncclSystemError, "MPI_Comm_split failed");
  }
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->size != nranks || c->rank != rank) {
    free_comm(c);
    return refuse(ncclInvalidUsage, "the ranks sharing the unique id do not match nranks/rank");
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm) free_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm) return refuse(ncclInvalidArgument, "no communicator");
  *state = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t rc = check_buffers(send, recv, comm); rc != ncclSuccess) return rc;
  if (type != ncclFloat || op != ncclSum)
    return refuse(ncclInvalidArgument, "only float sums are emulated");
  if (count > INT_MAX) return refuse(ncclInvalidArgument, "over INT_MAX elements for MPI");
  auto sum = std::make_shared<std::vector<float>>(count);
  int rc = MPI_SUCCESS;
  dptrain_emu::enqueue_and_run(stream, [&] {
    rc = MPI_Allreduce(send, sum->data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm->mpi);
  });
  if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Allreduce failed");
  land_later(stream, recv, std::move(sum));
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t rc = check_buffers(send, recv, comm); rc != ncclSuccess) return rc;
  if (type != ncclChar) return refuse(ncclInvalidArgument, "only ncclChar broadcasts are emulated");
  if (count > INT_MAX) return refuse(ncclInvalidArgument, "over INT_MAX bytes for MPI");
  auto bytes = std::make_shared<std::vector<char>>(count);
  int rc = MPI_SUCCESS;
  dptrain_emu::enqueue_and_run(stream, [&] {
    if (comm->rank == root) std::memcpy(bytes->data(), send, count);
    rc = MPI_Bcast(bytes->data(), static_cast<int>(count), MPI_BYTE, root, comm->mpi);
  });
  if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Bcast failed");
  land_later(stream, recv, std::move(bytes));
  return ncclSuccess;
}
