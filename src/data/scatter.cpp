// Implements: the MPI_Scatterv of a global batch (see scatter.hpp).
#include "dptrain/data/scatter.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "dptrain/common/error.hpp"

namespace dptrain {

Scatter::Scatter(MPI_Comm comm, std::uint64_t dim, std::uint64_t label_width, bool class_labels,
                 FeatureType wire, ShardGroup group)
    : comm_(comm),
      group_(std::move(group)),
      dim_(dim),
      label_width_(label_width),
      class_labels_(class_labels),
      wire_(wire),
      raw_(wire != FeatureType::kFloat32),
      raw_type_(feature_item_bytes(wire) == 1   ? MPI_UINT8_T
                : feature_item_bytes(wire) == 2 ? MPI_UINT16_T
                                                : MPI_INT32_T) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if (group_.members.empty()) {
    group_.world_size = size_;
    for (int r = 0; r < size_; ++r) group_.members.push_back(r);
  }
  DPT_REQUIRE(static_cast<int>(group_.members.size()) == size_ && group_.world_size >= size_,
              ExitCode::kOther, "scatter: the reader group does not match its communicator");
}

namespace {
// Rows times width as an MPI count; refuses what MPI's int cannot address
// rather than overflowing.
int element_count(std::uint64_t rows, std::uint64_t width) {
  const std::uint64_t v = rows * width;
  DPT_REQUIRE(v <= static_cast<std::uint64_t>(INT_MAX), ExitCode::kUsage,
              "a batch shard exceeds 2^31 values; lower --batch-size");
  return static_cast<int>(v);
}
}  // namespace

void Scatter::plan(std::uint64_t rows, Shard& out) {
  // Batches of one size repeat for an epoch: plan once per size change,
  // into vectors whose size never changes (no allocation after the first).
  if (rows == planned_rows_) {
    out.rows = my_rows_;
    return;
  }
  const auto p = static_cast<std::uint64_t>(group_.world_size);
  const std::uint64_t base = rows / p, extra = rows % p;
  const std::uint64_t label_width = label_width_;  // class ids per row (1; T of a token set) or targets
  auto rows_of = [&](std::size_t member) {
    return base + (static_cast<std::uint64_t>(group_.members[member]) < extra ? 1 : 0);
  };
  my_rows_ = static_cast<int>(rows_of(static_cast<std::size_t>(rank_)));
  out.rows = my_rows_;
  group_rows_ = 0;
  for (std::size_t m = 0; m < group_.members.size(); ++m) group_rows_ += rows_of(m);
  if (size_ > 1) {
    const auto g = static_cast<std::size_t>(size_);
    counts_.resize(g);
    displs_.resize(g);
    label_counts_.resize(g);
    label_displs_.resize(g);
    std::uint64_t first = 0;
    for (std::size_t r = 0; r < g; ++r) {
      const std::uint64_t n = rows_of(r);
      counts_[r] = element_count(n, dim_);
      displs_[r] = element_count(first, dim_);
      label_counts_[r] = element_count(n, label_width);
      label_displs_[r] = element_count(first, label_width);
      first += n;
    }
  }
  planned_rows_ = rows;
}

namespace {
// The root's side of a batch, checked against the plan every rank follows.
void check_batch(const Batch* batch, std::uint64_t rows, std::uint64_t held) {
  DPT_REQUIRE(batch != nullptr && batch->slot.rows == rows && batch->rows == held,
              ExitCode::kOther, "input queue and batch plan disagree on the batch size");
}
}  // namespace

void Scatter::scatter(const Batch* batch, std::uint64_t rows, Shard& out) {
  start(batch, rows, out);
  wait();
}

void Scatter::start(const Batch* batch, std::uint64_t rows, Shard& out) {
  DPT_REQUIRE(!in_flight_, ExitCode::kOther, "a scatter is already in flight");
  const bool root = rank_ == 0;
  plan(rows, out);
  if (root) {
    check_batch(batch, rows, group_rows_);
    DPT_REQUIRE((raw_ ? batch->raw.size() / feature_item_bytes(wire_) : batch->features.size()) >=
                    group_rows_ * dim_,
                ExitCode::kOther, "a batch holds fewer features than the scatter sends");
  }
  if (size_ == 1) {
    const std::uint64_t n = group_rows_;
    if (raw_)
      std::copy_n(batch->raw.data(), n * dim_ * feature_item_bytes(wire_), out.raw);
    else
      std::copy_n(batch->features.data(), n * dim_, out.features);
    if (class_labels_)
      std::copy_n(batch->labels.data(), n * label_width_, out.labels);
    else
      std::copy_n(batch->targets.data(), n * label_width_, out.targets);
    return;
  }
  const std::size_t me = static_cast<std::size_t>(rank_);
  if (raw_) {
    DPT_MPI_CHECK(MPI_Iscatterv(root ? batch->raw.data() : nullptr, counts_.data(), displs_.data(),
                                raw_type_, out.raw, counts_[me], raw_type_, 0, comm_,
                                &requests_[0]));
  } else {
    DPT_MPI_CHECK(MPI_Iscatterv(root ? batch->features.data() : nullptr, counts_.data(),
                                displs_.data(), MPI_FLOAT, out.features, counts_[me], MPI_FLOAT, 0,
                                comm_, &requests_[0]));
  }
  if (class_labels_) {
    DPT_MPI_CHECK(MPI_Iscatterv(root ? batch->labels.data() : nullptr, label_counts_.data(),
                                label_displs_.data(), MPI_INT32_T, out.labels, label_counts_[me],
                                MPI_INT32_T, 0, comm_, &requests_[1]));
  } else {
    DPT_MPI_CHECK(MPI_Iscatterv(root ? batch->targets.data() : nullptr, label_counts_.data(),
                                label_displs_.data(), MPI_FLOAT, out.targets, label_counts_[me],
                                MPI_FLOAT, 0, comm_, &requests_[1]));
  }
  in_flight_ = true;
}

bool Scatter::test() {
  if (!in_flight_) return true;
  int flag = 0;
  DPT_MPI_CHECK(MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE));
  if (flag) in_flight_ = false;
  return flag != 0;
}

void Scatter::wait() {
  if (!in_flight_) return;
  DPT_MPI_CHECK(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE));
  in_flight_ = false;
}

}  // namespace dptrain
