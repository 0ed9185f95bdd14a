// Implements: who reads the training rows (docs/design.md section 2,
// --input-readers). The global batch and its order are decided alike on
// every rank (BatchPlan, SampleOrder); a reader reads the shards of the
// ranks of its group and scatters them inside the group:
//   rank0  one reader, world rank 0, for every rank (the group is the world)
//   node   the local rank 0 of each node for the ranks of its node (a
//          node-local communicator, MPI_Comm_split_type SHARED: the scatter
//          runs over shared memory)
//   all    every rank for itself (a group of one: no scatter)
// Every rank gets the same rows whatever the choice, so the weights are
// bitwise the same.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

#include "dptrain/data/batch_plan.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace dptrain {

enum class ReaderMode { kRank0, kNode, kAll };

// "rank0" | "node" | "all"; the option is checked when it is parsed.
ReaderMode parse_reader_mode(const std::string& name);
const char* reader_mode_name(ReaderMode mode);

class ReaderGroup {
 public:
  // Collective over mpi.world().
  ReaderGroup(const MpiSession& mpi, ReaderMode mode);
  ~ReaderGroup();  // frees the communicator; never throws
  ReaderGroup(const ReaderGroup&) = delete;
  ReaderGroup& operator=(const ReaderGroup&) = delete;

  ReaderMode mode() const { return mode_; }
  // The ranks of this rank's group; its rank 0 is their reader.
  MPI_Comm comm() const { return comm_; }
  bool reader() const { return group_rank_ == 0; }
  // The world ranks the group's ranks stand for (Scatter, InputQueueConfig).
  const ShardGroup& shards() const { return shards_; }
  int readers() const { return readers_; }  // in the whole job

 private:
  ReaderMode mode_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int group_rank_ = 0, readers_ = 1;
  ShardGroup shards_;
};

}  // namespace dptrain
