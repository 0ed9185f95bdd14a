// Implements: the MPI communicator over host memory (CPU backend).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

// MPI counts are int: large buffers go in pieces of this many elements.
constexpr std::size_t kMaxCount = std::size_t(1) << 30;

// Sums go in two collectives, so that every element is added in rank order
// (((g0 + g1) + g2) + ...) whatever the message size: a reduce-scatter by
// all-to-all (rank r receives everyone's piece r and adds them in rank
// order) and an all-gather of the reduced pieces. The result is the same
// bitwise for any bucketing of the arena, on every rank (the gather copies
// one rank's result to all), and does not depend on which algorithm MPI
// picks for a size; the bytes moved equal those of a ring all-reduce.
// out[i] = a[i] + b[i]; out may be a (in place). One pass over memory.
void add_in_rank_order(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent) {
    DPT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    DPT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    // The gather phase has its own communicator: gathers start in the
    // order their exchanges complete, which need not interleave alike on
    // every rank with later exchanges.
    DPT_MPI_CHECK(MPI_Comm_dup(comm_, &gather_comm_));
    DPT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    DPT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (gather_comm_ != MPI_COMM_NULL) MPI_Comm_free(&gather_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* buf, std::size_t n) override {
    if (size_ == 1 || n == 0) return;
    Op& op = blocking_;
    for (std::size_t off = 0; off < n; off += max_op_elements()) {
      plan_even(op, buf + off, std::min(max_op_elements(), n - off));
      DPT_MPI_CHECK(MPI_Alltoallv(op.buf, op.send_counts.data(), op.displs.data(), MPI_FLOAT,
                                  op.scratch.data(), op.recv_counts.data(), op.recv_displs.data(),
                                  MPI_FLOAT, comm_));
      reduce(op);
      DPT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.buf, op.counts.data(),
                                   op.displs.data(), MPI_FLOAT, gather_comm_));
    }
  }

  void allreduce_host_sum(double* values, std::size_t n) override {
    if (n == 0) return;
    DPT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                                comm_));
  }

  int start_allreduce_sum(float* buf, std::size_t n) override {
    const int ticket = static_cast<int>(ticket_end_.size());
    if (size_ > 1) {
      for (std::size_t off = 0; off < n; off += max_op_elements()) {
        Op& op = next_op();
        plan_even(op, buf + off, std::min(max_op_elements(), n - off));
        start_exchange(op, true);
      }
    }
    ticket_end_.push_back(ops_used_);
    return ticket;
  }

  // The exchange and rank-order sum of the all-reduce without its gather:
  // each element is added exactly as there. Windows of at most kMaxCount
  // floats keep every piece's count an int.
  int start_reduce_scatter_sum(float* buf, const std::size_t* bounds) override {
    const int ticket = static_cast<int>(ticket_end_.size());
    const std::size_t n = bounds[size_];
    if (size_ > 1) {
      for (std::size_t off = 0; off < n; off += kMaxCount) {
        Op& op = next_op();
        plan_pieces(op, buf, bounds, off, std::min(n, off + kMaxCount));
        start_exchange(op, false);
      }
    }
    ticket_end_.push_back(ops_used_);
    return ticket;
  }

  void allgather(float* buf, const std::size_t* bounds) override {
    const std::size_t n = bounds[size_];
    if (size_ == 1 || n == 0) return;
    Op& op = blocking_;
    for (std::size_t off = 0; off < n; off += kMaxCount) {
      plan_pieces(op, buf, bounds, off, std::min(n, off + kMaxCount));
      DPT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.buf, op.counts.data(),
                                   op.displs.data(), MPI_FLOAT, gather_comm_));
    }
  }

  // MPI_Iallgatherv on the gather communicator, a window at a time.
  void start_allgather(float* buf, const std::size_t* bounds) override {
    finish_allgather();
    const std::size_t n = bounds[size_];
    if (size_ == 1 || n == 0) return;
    for (std::size_t off = 0; off < n; off += kMaxCount) {
      if (gathers_used_ == gathers_.size()) gathers_.emplace_back();  // first steps only
      Op& op = gathers_[gathers_used_++];
      plan_pieces(op, buf, bounds, off, std::min(n, off + kMaxCount));
      DPT_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.buf, op.counts.data(),
                                    op.displs.data(), MPI_FLOAT, gather_comm_, &op.gather));
    }
  }

  void finish_allgather() override {
    for (std::size_t i = 0; i < gathers_used_; ++i)
      DPT_MPI_CHECK(MPI_Wait(&gathers_[i].gather, MPI_STATUS_IGNORE));
    gathers_used_ = 0;
  }

  void progress() override {
    for (std::size_t i = 0; i < gathers_used_; ++i) {
      int flag = 0;
      DPT_MPI_CHECK(MPI_Test(&gathers_[i].gather, &flag, MPI_STATUS_IGNORE));
    }
    for (std::size_t i = ops_done_; i < ops_used_; ++i) {
      Op& op = ops_[i];
      int flag = 0;
      if (op.phase == Phase::kExchange) {
        DPT_MPI_CHECK(MPI_Test(&op.exchange, &flag, MPI_STATUS_IGNORE));
        if (!flag) break;  // gathers start in op order
        finish_exchange(op);
      }
      if (op.phase == Phase::kGather) {
        DPT_MPI_CHECK(MPI_Test(&op.gather, &flag, MPI_STATUS_IGNORE));
        if (flag) op.phase = Phase::kDone;
      }
    }
    while (ops_done_ < ops_used_ && ops_[ops_done_].phase == Phase::kDone) ++ops_done_;
  }

  bool done(int ticket) const override {
    if (ticket < 0 || static_cast<std::size_t>(ticket) >= ticket_end_.size()) return false;
    const std::size_t first = ticket == 0 ? 0 : ticket_end_[static_cast<std::size_t>(ticket) - 1];
    for (std::size_t i = first; i < ticket_end_[static_cast<std::size_t>(ticket)]; ++i)
      if (ops_[i].phase != Phase::kDone) return false;
    return true;
  }

  void wait_all() override {
    for (std::size_t i = ops_done_; i < ops_used_; ++i) {
      Op& op = ops_[i];
      if (op.phase == Phase::kExchange) {
        DPT_MPI_CHECK(MPI_Wait(&op.exchange, MPI_STATUS_IGNORE));
        finish_exchange(op);
      }
    }
    for (std::size_t i = ops_done_; i < ops_used_; ++i) {
      Op& op = ops_[i];
      if (op.phase == Phase::kGather) DPT_MPI_CHECK(MPI_Wait(&op.gather, MPI_STATUS_IGNORE));
      op.phase = Phase::kDone;
    }
    // The Op objects and their vectors stay for the next step: no
    // allocation once the first step has sized them.
    ops_used_ = ops_done_ = 0;
    ticket_end_.clear();
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
  enum class Phase { kExchange, kGather, kDone };
  // One sum of at most max_op_elements() floats: piece r of buf goes to rank
  // r, which receives every rank's piece r into scratch (rank-major).
  struct Op {
    float* buf = nullptr;
    std::vector<int> counts, displs, send_counts, recv_counts, recv_displs;
    std::vector<float> scratch;
    MPI_Request exchange = MPI_REQUEST_NULL, gather = MPI_REQUEST_NULL;
    Phase phase = Phase::kDone;
    bool gather_after = true;  // all-reduce; false: reduce-scatter
  };

  // Pieces are counted in int: keep each under 2^30 floats.
  std::size_t max_op_elements() const { return kMaxCount * static_cast<std::size_t>(size_); }

  Op& next_op() {
    if (ops_used_ == ops_.size()) ops_.emplace_back();  // first steps only
    return ops_[ops_used_++];
  }

  // Pieces of n / P floats (the first n % P one more) of buf[0, n).
  void plan_even(Op& op, float* buf, std::size_t n) {
    const auto p = static_cast<std::size_t>(size_);
    op.counts.resize(p);
    for (std::size_t r = 0; r < p; ++r) op.counts[r] = static_cast<int>(n / p + (r < n % p ? 1 : 0));
    plan(op, buf);
  }

  // The window buf[begin, end) cut where `bounds` cuts it.
  void plan_pieces(Op& op, float* buf, const std::size_t* bounds, std::size_t begin,
                   std::size_t end) {
    const auto p = static_cast<std::size_t>(size_);
    op.counts.resize(p);
    for (std::size_t r = 0; r < p; ++r) {
      const std::size_t lo = std::clamp(bounds[r], begin, end);
      const std::size_t hi = std::clamp(bounds[r + 1], begin, end);
      op.counts[r] = static_cast<int>(hi > lo ? hi - lo : 0);
    }
    plan(op, buf + begin);
  }

  // The exchange plan for op.counts: piece r of buf goes to rank r, which
  // receives every rank's piece r into scratch (rank-major).
  void plan(Op& op, float* buf) {
    const auto p = static_cast<std::size_t>(size_);
    const auto me = static_cast<std::size_t>(rank_);
    op.buf = buf;
    op.displs.resize(p);
    op.send_counts.resize(p);
    op.recv_counts.resize(p);
    op.recv_displs.resize(p);
    std::size_t at = 0;
    for (std::size_t r = 0; r < p; ++r) {
      op.displs[r] = static_cast<int>(at);
      at += static_cast<std::size_t>(op.counts[r]);
    }
    // This rank's own piece stays where it is (no self copy).
    const int mine = op.counts[me];
    for (std::size_t r = 0; r < p; ++r) {
      op.send_counts[r] = r == me ? 0 : op.counts[r];
      op.recv_counts[r] = r == me ? 0 : mine;
      op.recv_displs[r] = static_cast<int>(r) * mine;
    }
    op.scratch.resize(p * static_cast<std::size_t>(mine));
  }

  void start_exchange(Op& op, bool gather_after) {
    op.gather_after = gather_after;
    DPT_MPI_CHECK(MPI_Ialltoallv(op.buf, op.send_counts.data(), op.displs.data(), MPI_FLOAT,
                                 op.scratch.data(), op.recv_counts.data(), op.recv_displs.data(),
                                 MPI_FLOAT, comm_, &op.exchange));
    op.phase = Phase::kExchange;
  }

  // This rank's piece: the sum of every rank's copy, added in rank order
  // (its own copy read in place, the others from scratch).
  void reduce(Op& op) const {
    const auto me = static_cast<std::size_t>(rank_);
    const auto count = static_cast<std::size_t>(op.counts[me]);
    float* out = op.buf + op.displs[me];
    // Ranks 0 and 1 read their own copy in place in the first addition;
    // later ranks keep it aside (in its unused scratch slot) first, since
    // out holds the running sum by the time their turn comes.
    float* own = out;
    if (me >= 2) {
      own = op.scratch.data() + me * count;
      std::copy_n(out, count, own);
    }
    auto piece = [&](std::size_t r) -> const float* {
      return r == me ? own : op.scratch.data() + r * count;
    };
    add_in_rank_order(out, piece(0), piece(1), count);
    for (std::size_t r = 2; r < static_cast<std::size_t>(size_); ++r)
      add_in_rank_order(out, out, piece(r), count);
  }

  // This rank's piece is summed; an all-reduce then gathers the pieces.
  void finish_exchange(Op& op) {
    reduce(op);
    if (!op.gather_after) {
      op.phase = Phase::kDone;
      return;
    }
    DPT_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.buf, op.counts.data(),
                                  op.displs.data(), MPI_FLOAT, gather_comm_, &op.gather));
    op.phase = Phase::kGather;
  }

  MPI_Comm comm_ = MPI_COMM_NULL, gather_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  Op blocking_;                        // allreduce_sum's plan, reused
  std::vector<Op> gathers_;            // start_allgather's windows (kept)
  std::size_t gathers_used_ = 0;       // outstanding ones
  std::vector<Op> ops_;                // started sums, in start order (kept)
  std::size_t ops_used_ = 0, ops_done_ = 0;
  std::vector<std::size_t> ticket_end_;  // per ticket: one past its last op
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace dptrain
