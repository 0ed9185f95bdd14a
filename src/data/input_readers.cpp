// Implements: ReaderGroup and the --input-readers names (see
// input_readers.hpp).
#include "dptrain/data/input_readers.hpp"

#include "dptrain/common/error.hpp"

namespace dptrain {

ReaderMode parse_reader_mode(const std::string& name) {
  if (name == "node") return ReaderMode::kNode;
  if (name == "all") return ReaderMode::kAll;
  if (name != "rank0") throw_bad_choice("input-readers", name, "rank0, node, all");
  return ReaderMode::kRank0;
}

const char* reader_mode_name(ReaderMode mode) {
  switch (mode) {
    case ReaderMode::kRank0: return "rank0";
    case ReaderMode::kNode: return "node";
    case ReaderMode::kAll: return "all";
  }
  return "?";
}

ReaderGroup::ReaderGroup(const MpiSession& mpi, ReaderMode mode) : mode_(mode) {
  // A communicator of its own in every mode, so that the input scatter
  // never matches anyone else's traffic.
  if (mode == ReaderMode::kRank0) {
    DPT_MPI_CHECK(MPI_Comm_dup(mpi.world(), &comm_));
  } else if (mode == ReaderMode::kNode) {
    // Ordered by world rank, so a node's reader is its lowest world rank
    // (local rank 0, as MpiSession counts it).
    DPT_MPI_CHECK(MPI_Comm_split_type(mpi.world(), MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL,
                                      &comm_));
  } else {
    DPT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &comm_));
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int size = 1;
  MPI_Comm_rank(comm_, &group_rank_);
  MPI_Comm_size(comm_, &size);
  shards_.world_size = mpi.size();
  shards_.members.resize(static_cast<std::size_t>(size));
  const int me = mpi.rank();
  DPT_MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, shards_.members.data(), 1, MPI_INT, comm_));
  int is_reader = reader() ? 1 : 0;
  DPT_MPI_CHECK(MPI_Allreduce(&is_reader, &readers_, 1, MPI_INT, MPI_SUM, mpi.world()));
}

ReaderGroup::~ReaderGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

}  // namespace dptrain
