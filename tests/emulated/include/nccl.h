// Implements: the part of NCCL that src/backends/cuda/nccl_comm.cpp calls, for the
// host emulation (tests/emulated/), over MPI (nccl_over_mpi.cpp), so that
// the real NCCL communicator — its unique-id exchange, its own stream and
// the events that order it after the compute stream and the compute stream
// after it — runs without a GPU. A communicator is an MPI communicator of
// the ranks that share a unique id (ncclCommInitRank splits MPI_COMM_WORLD:
// every rank of it makes its communicator at the same time, as dptrain
// does). A collective's exchange runs at once, after everything its stream
// must wait for (streams.hpp), so each rank enters MPI in the order of its
// host code and sends what the stream's events made ready; its result is
// written when the stream gets there, so only work that waits for the
// stream sees it. Calls inside ncclGroupStart/ncclGroupEnd are held and
// issued, in order, at the outermost ncclGroupEnd, as NCCL launches a group.
// Emulated: ncclAllReduce, ncclReduce, ncclReduceScatter (float sums),
// ncclBroadcast (bytes), ncclAllGather (floats), in place or not, and the
// communicator's life cycle; plus a count of the collectives issued
// (dptrain_emu::nccl_calls, not NCCL's), for tests of which path ran.
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

typedef struct ncclCommEmulated* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef enum { ncclChar = 0, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

const char* ncclGetErrorString(ncclResult_t r);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state);
ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
// In place when recv + rank * recvcount is send, as in NCCL.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
// In place when recv + rank * sendcount is send, as in NCCL.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

namespace dptrain_emu {
// The emulation's own: collectives issued by this process since the start,
// by kind (a group's calls when it ends; refused ones not), so that a test
// can tell which collectives a caller chose (tests/gpu/test_nccl.cpp).
enum class NcclCall { kAllReduce, kReduce, kReduceScatter, kBroadcast, kAllGather, kCount };
std::size_t nccl_calls(NcclCall c);
}  // namespace dptrain_emu
