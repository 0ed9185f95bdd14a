// Implements: moving the shards of a global batch from the reader to every
// rank with MPI_Scatterv, cut by the rank split (rank_split.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include <mpi.h>

#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/rank_split.hpp"
#include "dptrain/model/shard.hpp"

namespace dptrain {

class Scatter {
 public:
  // dim: features per row; label_width: 1 for class ids, K for targets.
  // wire: the stored feature type; other than float32, features travel as
  // stored from Batch::raw into Shard::raw.
  // group: the world ranks comm's ranks stand for (default: comm is the world).
  Scatter(MPI_Comm comm, std::uint64_t dim, std::uint64_t label_width, bool class_labels,
          FeatureType wire = FeatureType::kFloat32, ShardGroup group = {});
  // Collective. `batch` is read on comm's rank 0 only (may be null
  // elsewhere) and holds the group's rows (group_rows, in order); every rank
  // passes the same global `rows` (from the BatchPlan). Fills out.rows and
  // writes into out's buffers, which must hold max_shard_rows rows.
  void scatter(const Batch* batch, std::uint64_t rows, Shard& out);

  // The same as scatter(), non-blocking (MPI_Iscatterv): start() returns at
  // once; out's buffers and rank 0's batch must stay untouched until wait()
  // (or a test() that returned true). One scatter in flight at a time.
  void start(const Batch* batch, std::uint64_t rows, Shard& out);
  bool test();  // advances it; true once complete (also when none is in flight)
  void wait();

 private:
  // Fills the element counts and offsets of this batch's shards.
  void plan(std::uint64_t rows, Shard& out);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  ShardGroup group_;
  std::uint64_t group_rows_ = 0;  // rows of the batch the root holds
  std::uint64_t dim_, label_width_;
  bool class_labels_;
  FeatureType wire_;
  bool raw_;                 // wire_ is not float32: features travel from Batch::raw
  MPI_Datatype raw_type_;    // one stored feature value on the wire
  std::vector<int> counts_, displs_;             // features
  std::vector<int> label_counts_, label_displs_;  // labels or targets
  std::uint64_t planned_rows_ = ~std::uint64_t(0);  // batch size the counts are for
  int my_rows_ = 0;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool in_flight_ = false;
};

}  // namespace dptrain
