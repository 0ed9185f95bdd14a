// Implements: the NCCL of include/nccl.h over MPI, for the host emulation.
// A collective runs in two parts on its stream: the exchange at once (the
// stream run up to it first, so the data it sends is what the stream's
// waits made ready, and every rank reaches MPI in the order of its host
// code), and the write of the result queued after it (so the data is there
// only for work that waits for the stream). On a GPU the collective reads
// and writes anywhere in its run; this is one ordering of it.
//
// Groups: between ncclGroupStart and the outermost ncclGroupEnd a call is
// checked and held, and ncclGroupEnd issues the held calls in call order,
// each as above, as NCCL launches a group only at its end (so a group left
// open never runs, and a call that failed in it cancels the whole group).
// Issuing them one after another, each exchange at once as outside a
// group, is one schedule of the group, as the GPU's is: every rank makes
// the same calls in the same order (NCCL asks it of collectives, grouped or
// not), so the ranks enter MPI in the same order and no blocking exchange
// waits for one that is still held; each exchange sees what the stream's
// waits made ready before the group, and each result lands later on the
// stream. A call may also see an earlier call's result, which on a GPU runs
// concurrently with it; a correct group never reads what another of its
// calls writes, so that is no different either.
#include <mpi.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
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

// Held calls of the open group (group_depth > 0) and the first error of a
// call in it; ncclGroupEnd issues them, or drops them after an error.
thread_local int t_group_depth = 0;
thread_local std::vector<std::function<ncclResult_t()>> t_grouped;
thread_local ncclResult_t t_group_error = ncclSuccess;

// A checked call: issued now, or held until the group ends.
ncclResult_t issue(std::function<ncclResult_t()> call) {
  if (t_group_depth == 0) return call();
  t_grouped.push_back(std::move(call));
  return ncclSuccess;
}

// A refused call; in a group, that cancels the group.
ncclResult_t refuse_call(ncclResult_t rc, const std::string& why) {
  if (t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = rc;
  return refuse(rc, why);
}

ncclResult_t check_buffers(const void* send, const void* recv, ncclComm_t comm) {
  if (!comm) return refuse_call(ncclInvalidArgument, "no communicator");
  if (!send || !recv || !dptrain_emu::is_device_pointer(send) ||
      !dptrain_emu::is_device_pointer(recv))
    return refuse_call(ncclInvalidArgument, "a buffer is not device memory");
  return ncclSuccess;
}

// [p, p + bytes) of send and recv inside device allocations: a collective
// over more than its buffers hold is refused, as NCCL would fault.
ncclResult_t check_extents(const void* send, std::size_t send_bytes, const void* recv,
                           std::size_t recv_bytes) {
  if (!dptrain_emu::is_device_range(send, send_bytes) ||
      !dptrain_emu::is_device_range(recv, recv_bytes))
    return refuse_call(ncclInvalidArgument, "a buffer is smaller than the collective's count");
  return ncclSuccess;
}

std::array<std::atomic<std::size_t>, static_cast<std::size_t>(dptrain_emu::NcclCall::kCount)>
    g_calls{};
void tally(dptrain_emu::NcclCall c) { ++g_calls[static_cast<std::size_t>(c)]; }

// The result is written when the stream gets to it, after the exchange:
// work that reads it without waiting for the stream sees the old data.
template <typename T>
void land_later(cudaStream_t stream, void* recv, std::shared_ptr<std::vector<T>> result) {
  dptrain_emu::enqueue_late(stream, [recv, result] {
    std::memcpy(recv, result->data(), result->size() * sizeof(T));
  });
}

}  // namespace

std::size_t dptrain_emu::nccl_calls(NcclCall c) { return g_calls[static_cast<std::size_t>(c)]; }

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
    return refuse_call(ncclInvalidArgument, "only float sums are emulated");
  if (count > INT_MAX) return refuse_call(ncclInvalidArgument, "over INT_MAX elements for MPI");
  return issue([=] {
    tally(dptrain_emu::NcclCall::kAllReduce);
    auto sum = std::make_shared<std::vector<float>>(count);
    int rc = MPI_SUCCESS;
    dptrain_emu::enqueue_and_run(stream, [&] {
      rc = MPI_Allreduce(send, sum->data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm->mpi);
    });
    if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Allreduce failed");
    land_later(stream, recv, std::move(sum));
    return ncclSuccess;
  });
}

// recv is used on the root only, as in NCCL: elsewhere it may be anything.
ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm) return refuse_call(ncclInvalidArgument, "no communicator");
  if (root < 0 || root >= comm->size) return refuse_call(ncclInvalidArgument, "no such root");
  const bool at_root = comm->rank == root;
  if (const ncclResult_t rc = check_buffers(send, at_root ? recv : send, comm); rc != ncclSuccess)
    return rc;
  if (type != ncclFloat || op != ncclSum)
    return refuse_call(ncclInvalidArgument, "only float sums are emulated");
  if (count > INT_MAX) return refuse_call(ncclInvalidArgument, "over INT_MAX elements for MPI");
  return issue([=] {
    tally(dptrain_emu::NcclCall::kReduce);
    auto sum = std::make_shared<std::vector<float>>(at_root ? count : 0);
    int rc = MPI_SUCCESS;
    dptrain_emu::enqueue_and_run(stream, [&] {
      rc = MPI_Reduce(send, sum->data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, root,
                      comm->mpi);
    });
    if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Reduce failed");
    if (at_root) land_later(stream, recv, std::move(sum));
    return ncclSuccess;
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t rc = check_buffers(send, recv, comm); rc != ncclSuccess) return rc;
  if (root < 0 || root >= comm->size) return refuse_call(ncclInvalidArgument, "no such root");
  if (type != ncclChar)
    return refuse_call(ncclInvalidArgument, "only ncclChar broadcasts are emulated");
  if (count > INT_MAX) return refuse_call(ncclInvalidArgument, "over INT_MAX bytes for MPI");
  return issue([=] {
    tally(dptrain_emu::NcclCall::kBroadcast);
    auto bytes = std::make_shared<std::vector<char>>(count);
    int rc = MPI_SUCCESS;
    dptrain_emu::enqueue_and_run(stream, [&] {
      if (comm->rank == root) std::memcpy(bytes->data(), send, count);
      rc = MPI_Bcast(bytes->data(), static_cast<int>(count), MPI_BYTE, root, comm->mpi);
    });
    if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Bcast failed");
    land_later(stream, recv, std::move(bytes));
    return ncclSuccess;
  });
}

// Every rank's block of recvcount sums: MPI_Reduce_scatter_block sums each
// element in an order fixed by the rank count and the size (as MPI_Reduce
// does for ncclReduce), so the same call gives the same bits every time. In
// place (send holds the whole input, recv is its block rank): the exchange
// reads send, the block lands later.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (const ncclResult_t rc = check_buffers(sendbuff, recvbuff, comm); rc != ncclSuccess)
    return rc;
  if (datatype != ncclFloat || op != ncclSum)
    return refuse_call(ncclInvalidArgument, "only float sums are emulated");
  if (recvcount > INT_MAX) return refuse_call(ncclInvalidArgument, "over INT_MAX elements for MPI");
  const std::size_t block = recvcount * sizeof(float);
  if (const ncclResult_t rc =
          check_extents(sendbuff, block * static_cast<std::size_t>(comm->size), recvbuff, block);
      rc != ncclSuccess)
    return rc;
  return issue([=] {
    tally(dptrain_emu::NcclCall::kReduceScatter);
    auto sum = std::make_shared<std::vector<float>>(recvcount);
    int rc = MPI_SUCCESS;
    dptrain_emu::enqueue_and_run(stream, [&] {
      rc = MPI_Reduce_scatter_block(sendbuff, sum->data(), static_cast<int>(recvcount), MPI_FLOAT,
                                    MPI_SUM, comm->mpi);
    });
    if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Reduce_scatter_block failed");
    land_later(stream, recvbuff, std::move(sum));
    return ncclSuccess;
  });
}

// Rank r's sendcount floats into block r of recv on every rank, moved as
// bytes. In place (send is block rank of recv): the exchange reads send,
// the blocks land later.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t rc = check_buffers(sendbuff, recvbuff, comm); rc != ncclSuccess)
    return rc;
  if (datatype != ncclFloat)
    return refuse_call(ncclInvalidArgument, "only float all-gathers are emulated");
  const std::size_t block = sendcount * sizeof(float);
  if (block > INT_MAX) return refuse_call(ncclInvalidArgument, "over INT_MAX bytes for MPI");
  if (const ncclResult_t rc =
          check_extents(sendbuff, block, recvbuff, block * static_cast<std::size_t>(comm->size));
      rc != ncclSuccess)
    return rc;
  return issue([=] {
    tally(dptrain_emu::NcclCall::kAllGather);
    auto all = std::make_shared<std::vector<float>>(sendcount * static_cast<std::size_t>(comm->size));
    int rc = MPI_SUCCESS;
    dptrain_emu::enqueue_and_run(stream, [&] {
      rc = MPI_Allgather(sendbuff, static_cast<int>(block), MPI_BYTE, all->data(),
                         static_cast<int>(block), MPI_BYTE, comm->mpi);
    });
    if (rc != MPI_SUCCESS) return refuse(ncclSystemError, "MPI_Allgather failed");
    land_later(stream, recvbuff, std::move(all));
    return ncclSuccess;
  });
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

// The first error of the group (its calls then never run), else the first
// error of its exchanges.
ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd: not in a group call");
  if (--t_group_depth > 0) return ncclSuccess;
  auto calls = std::move(t_grouped);
  t_grouped.clear();
  ncclResult_t first = std::exchange(t_group_error, ncclSuccess);
  if (first != ncclSuccess) return first;
  for (auto& call : calls)
    if (const ncclResult_t rc = call(); rc != ncclSuccess && first == ncclSuccess) first = rc;
  return first;
}
