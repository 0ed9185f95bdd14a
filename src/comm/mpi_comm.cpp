// Implements: the MPI communicator over host memory (CPU backend).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "dptrain/comm.hpp"
#include "dptrain/error.hpp"

namespace dptrain {
namespace {

// MPI counts are int: large buffers go in pieces of this many elements.
constexpr std::size_t kMaxCount = std::size_t(1) << 30;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent) {
    DPT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    DPT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    DPT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    DPT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* buf, std::size_t n) override {
    if (size_ == 1) return;
    for (std::size_t off = 0; off < n; off += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, n - off));
      DPT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, count, MPI_FLOAT, MPI_SUM, comm_));
    }
  }

  void broadcast(void* buf, std::size_t bytes, int root) override {
    if (size_ == 1) return;
    auto* p = static_cast<unsigned char*>(buf);
    for (std::size_t off = 0; off < bytes; off += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, bytes - off));
      DPT_MPI_CHECK(MPI_Bcast(p + off, count, MPI_BYTE, root, comm_));
    }
  }

  void barrier() override { DPT_MPI_CHECK(MPI_Barrier(comm_)); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace dptrain
