// Implements: the NCCL communicator over device memory of the CUDA backend
// (created by its make_communicator, with its compute stream and device).
// Collectives run on the communicator's own stream, ordered after the
// backend's compute stream by an event and followed by another event the
// compute stream waits on: the host never blocks (but where the staging
// buffer of the equal-piece reduce-scatter and all-gather grows, which is in
// the first step only), yet every later kernel or copy on the compute stream
// sees the reduced data.
#include "backends/cuda/nccl_comm.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "backends/cuda/nccl_pieces.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm parent, cudaStream_t compute, int device)
      : compute_(compute), device_(device), unwinding_at_start_(std::uncaught_exceptions()) {
    DPT_MPI_CHECK(MPI_Comm_dup(parent, &mpi_.comm));
    DPT_MPI_CHECK(MPI_Comm_set_errhandler(mpi_.comm, MPI_ERRORS_RETURN));
    DPT_MPI_CHECK(MPI_Comm_rank(mpi_.comm, &rank_));
    DPT_MPI_CHECK(MPI_Comm_size(mpi_.comm, &size_));
    DPT_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = cuda::Stream::create();
    compute_done_ = cuda::Event::create();
    comm_done_ = cuda::Event::create();
    pieces_.emplace(rank_, size_, stream_.get());

    // Rank 0 always reaches the broadcast, with a flag when it has no id, so
    // that a failure there leaves nobody waiting in MPI_Bcast.
    struct {
      ncclUniqueId id;
      int ok;
    } msg{};
    std::string why;
    if (rank_ == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&msg.id);
      msg.ok = rc == ncclSuccess ? 1 : 0;
      if (rc != ncclSuccess) why = ncclGetErrorString(rc);
    }
    DPT_MPI_CHECK(MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, mpi_.comm));
    if (!msg.ok)
      throw Error(ExitCode::kComm,
                  "NCCL: rank 0 could not create the unique id" + (why.empty() ? "" : ": " + why));
    ncclComm_t c = nullptr;
    DPT_NCCL_CHECK(ncclCommInitRank(&c, size_, msg.id, rank_));
    comm_.store(c);
  }

  // The one place the communicator is freed, on the owning thread.
  // Destroy waits for queued operations, which never finish when a peer is
  // gone: ncclCommAbort unless nobody marked us dead, we are not being
  // unwound by an error, and the stream drained cleanly.
  ~NcclCommunicator() override {
    if (!comm_.load()) return;
    const bool clean =
        !aborted_.load() && std::uncaught_exceptions() <= unwinding_at_start_ && drained();
    ncclComm_t c = comm_.exchange(nullptr);
    if (clean)
      ncclCommDestroy(c);
    else
      ncclCommAbort(c);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* buf, std::size_t n) override { allreduce_sum(buf, buf, n); }

  // Host scalars need no device: MPI on the communicator's own duplicate.
  void allreduce_host_sum(double* values, std::size_t n) override {
    if (n == 0) return;
    DPT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                                mpi_.comm));
  }

  // The in-place sum is this with in == out.
  void allreduce_sum(const float* in, float* out, std::size_t n) {
    if (n == 0) return;
    after_compute();
    DPT_NCCL_CHECK(ncclAllReduce(in, out, n, ncclFloat, ncclSum, live(), stream_.get()));
    before_compute();
  }

  // Bucketed gradients: the comm stream waits for the compute work issued so
  // far (this bucket's backward), then reduces while the compute stream goes
  // on with earlier layers; the compute stream waits only in wait_all().
  int start_allreduce_sum(float* buf, std::size_t n) override {
    if (n > 0) {
      after_compute();
      DPT_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, live(), stream_.get()));
      pending_ = true;
    }
    return started_++;
  }
  // Completion is known on the device only; the host never waits for it.
  bool done(int) const override { return false; }
  void wait_all() override {
    if (pending_) before_compute();
    pending_ = false;
    started_ = 0;
  }

  // Sliced state: each piece is summed onto its owner only. ncclReduceScatter
  // wants P equal pieces, and the pieces may be uneven or empty, so two
  // paths (NcclPieces, nccl_pieces.cpp): near-equal pieces, all non-empty, go
  // through the staging buffer padded to equal ones and one in-place
  // ncclReduceScatter; any other cut is one ncclReduce per non-empty piece,
  // rooted at its owner, all in one group (one launch). Either way every
  // step runs on the communication stream, ordered and completed as
  // start_allreduce_sum.
  int start_reduce_scatter_sum(float* buf, const std::size_t* bounds) override {
    if (bounds[size_] > 0) {
      const ncclComm_t c = live();
      after_compute();
      pieces_->reduce_scatter(buf, bounds, c);
      pending_ = true;
    }
    return started_++;
  }

  // Ordered as broadcast: the compute stream waits for it at once.
  void allgather(float* buf, const std::size_t* bounds) override {
    start_allgather(buf, bounds);
    finish_allgather();
  }

  // As allgather, but the compute stream waits for it only in
  // finish_allgather: the gather runs on the communication stream meanwhile.
  // The paths of start_reduce_scatter_sum: one ncclAllGather over the
  // padded pieces in the staging buffer, or each owner broadcasting its
  // piece, all in one group.
  void start_allgather(float* buf, const std::size_t* bounds) override {
    finish_allgather();
    if (bounds[size_] == 0) return;
    const ncclComm_t c = live();
    after_compute();
    pieces_->allgather(buf, bounds, c);
    gathering_ = true;
  }
  void finish_allgather() override {
    if (gathering_) before_compute();
    gathering_ = false;
  }

  void broadcast(void* buf, std::size_t bytes, int root) override {
    if (bytes == 0) return;
    after_compute();
    DPT_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclChar, root, live(), stream_.get()));
    before_compute();
  }

  void barrier() override {
    live();
    // The compute stream waits on every collective, so draining it drains
    // both; then the host-side barrier.
    DPT_CUDA_CHECK(cudaStreamSynchronize(compute_));
    DPT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    DPT_MPI_CHECK(MPI_Barrier(mpi_.comm));
  }

  // Marks the communicator dead: later calls throw Error(kComm) instead of
  // entering NCCL. Safe from any thread (the watchdog) and more than once.
  // It frees nothing: ncclCommAbort frees the communicator, and the owning
  // thread may be inside an NCCL call with it right now. The destructor,
  // on the owning thread, aborts it; a watchdog ends the process instead.
  void abort() noexcept override { aborted_.store(true); }

  // Empty while healthy; otherwise what NCCL reports for errors found in the
  // background (a peer died, the network failed). Polled by the watchdog.
  std::string async_error() const override {
    if (aborted_.load()) return "NCCL communicator was aborted";
    ncclComm_t c = comm_.load();
    if (!c) return {};
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(c, &state);
    if (rc != ncclSuccess) return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(rc);
    if (state != ncclSuccess && state != ncclInProgress) return ncclGetErrorString(state);
    return {};
  }

 private:
  ncclComm_t live() const {
    ncclComm_t c = comm_.load();
    if (aborted_.load() || !c)
      throw Error(ExitCode::kComm,
                  "NCCL communicator was aborted (rank " + std::to_string(rank_) + ")");
    return c;
  }
  void after_compute() {
    DPT_CUDA_CHECK(cudaEventRecord(compute_done_.get(), compute_));
    DPT_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), compute_done_.get(), 0));
  }
  void before_compute() {
    DPT_CUDA_CHECK(cudaEventRecord(comm_done_.get(), stream_.get()));
    DPT_CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_.get(), 0));
  }

  // True when the comm stream finishes within a short grace period without
  // an NCCL error.
  bool drained() const noexcept {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      if (!async_error().empty()) return false;
      const cudaError_t q = cudaStreamQuery(stream_.get());
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  // Freed even when the constructor throws after the dup.
  struct OwnedMpiComm {
    MPI_Comm comm = MPI_COMM_NULL;
    OwnedMpiComm() = default;
    OwnedMpiComm(const OwnedMpiComm&) = delete;
    OwnedMpiComm& operator=(const OwnedMpiComm&) = delete;
    ~OwnedMpiComm() {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  };

  OwnedMpiComm mpi_;
  int rank_ = 0, size_ = 1;
  cudaStream_t compute_;  // owned by the backend, which outlives us
  int device_;
  int unwinding_at_start_;
  cuda::Stream stream_;
  cuda::Event compute_done_, comm_done_;
  std::optional<NcclPieces> pieces_;  // reduce-scatters and all-gathers, on stream_
  std::atomic<ncclComm_t> comm_{nullptr};  // read by async_error() on the watchdog thread
  std::atomic<bool> aborted_{false};
  int started_ = 0;       // bucket tickets since the last wait_all()
  bool pending_ = false;  // a started sum the compute stream has not waited on
  bool gathering_ = false;  // a started gather the compute stream has not waited on
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm parent, cudaStream_t compute,
                                                     int device) {
  return std::make_unique<NcclCommunicator>(parent, compute, device);
}

void nccl_allreduce_sum(Communicator& comm, const float* in, float* out, std::size_t n) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  DPT_REQUIRE(nccl, ExitCode::kOther, "nccl_allreduce_sum needs an NCCL communicator, not " + comm.name());
  nccl->allreduce_sum(in, out, n);
}

}  // namespace dptrain
