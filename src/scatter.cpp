// Implements: shard arithmetic and the MPI_Scatterv of a global batch.
#include "dptrain/scatter.hpp"

#include <algorithm>
#include <climits>

#include "dptrain/error.hpp"

namespace dptrain {

std::vector<int> shard_counts(std::uint64_t rows, int ranks) {
  std::vector<int> c(static_cast<std::size_t>(ranks));
  const std::uint64_t base = rows / static_cast<std::uint64_t>(ranks);
  const std::uint64_t extra = rows % static_cast<std::uint64_t>(ranks);
  for (int r = 0; r < ranks; ++r)
    c[static_cast<std::size_t>(r)] = static_cast<int>(base + (static_cast<std::uint64_t>(r) < extra ? 1 : 0));
  return c;
}

std::vector<int> shard_offsets(const std::vector<int>& counts) {
  std::vector<int> o(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) o[i] = o[i - 1] + counts[i - 1];
  return o;
}

int max_shard_rows(std::uint64_t rows, int ranks) {
  return static_cast<int>((rows + static_cast<std::uint64_t>(ranks) - 1) / static_cast<std::uint64_t>(ranks));
}

Scatter::Scatter(MPI_Comm comm, std::uint64_t dim, std::uint64_t label_width, bool class_labels)
    : comm_(comm), dim_(dim), label_width_(label_width), class_labels_(class_labels) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

namespace {
// Scales row counts/offsets to element counts; refuses what MPI's int cannot
// address rather than overflowing.
void scale_counts(const std::vector<int>& rows, std::uint64_t width, std::vector<int>& out) {
  out.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::uint64_t v = static_cast<std::uint64_t>(rows[i]) * width;
    DPT_REQUIRE(v <= static_cast<std::uint64_t>(INT_MAX), ExitCode::kUsage,
                "a batch shard exceeds 2^31 values; lower --batch-size");
    out[i] = static_cast<int>(v);
  }
}
}  // namespace

void Scatter::scatter(const Batch* batch, std::uint64_t rows, Shard& out) {
  const std::vector<int> rows_per_rank = shard_counts(rows, size_);
  out.rows = rows_per_rank[static_cast<std::size_t>(rank_)];
  const bool root = rank_ == 0;
  if (root) {
    DPT_REQUIRE(batch != nullptr && batch->slot.rows == rows, ExitCode::kOther,
                "input queue and batch plan disagree on the batch size");
  }
  if (size_ == 1) {
    std::copy(batch->features.begin(), batch->features.begin() + static_cast<std::ptrdiff_t>(rows * dim_), out.features);
    if (class_labels_)
      std::copy(batch->labels.begin(), batch->labels.begin() + static_cast<std::ptrdiff_t>(rows), out.labels);
    else
      std::copy(batch->targets.begin(), batch->targets.begin() + static_cast<std::ptrdiff_t>(rows * label_width_), out.targets);
    return;
  }
  const std::vector<int> row_offsets = shard_offsets(rows_per_rank);
  scale_counts(rows_per_rank, dim_, counts_);
  scale_counts(row_offsets, dim_, displs_);
  DPT_MPI_CHECK(MPI_Scatterv(root ? batch->features.data() : nullptr, counts_.data(), displs_.data(),
                             MPI_FLOAT, out.features, counts_[static_cast<std::size_t>(rank_)],
                             MPI_FLOAT, 0, comm_));
  if (class_labels_) {
    DPT_MPI_CHECK(MPI_Scatterv(root ? batch->labels.data() : nullptr, rows_per_rank.data(),
                               row_offsets.data(), MPI_INT32_T, out.labels, out.rows, MPI_INT32_T,
                               0, comm_));
  } else {
    scale_counts(rows_per_rank, label_width_, counts_);
    scale_counts(row_offsets, label_width_, displs_);
    DPT_MPI_CHECK(MPI_Scatterv(root ? batch->targets.data() : nullptr, counts_.data(),
                               displs_.data(), MPI_FLOAT, out.targets,
                               counts_[static_cast<std::size_t>(rank_)], MPI_FLOAT, 0, comm_));
  }
}

}  // namespace dptrain
