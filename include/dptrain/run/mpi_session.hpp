// Implements: the MPI session of a run: init and finalize, this rank's place
// (rank, node, node-local rank) and the world communicator every collective uses.
#pragma once

#include <string>

#include <mpi.h>

namespace dptrain {

class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();  // MPI_Finalize; never throws
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  MPI_Comm world() const { return world_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks of this node
  int local_size() const { return local_size_; }
  int nodes() const { return nodes_; }
  const std::string& host() const { return host_; }
  std::string mpi_version() const;

 private:
  MPI_Comm world_ = MPI_COMM_NULL;  // a dup of MPI_COMM_WORLD, errors returned
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  std::string host_;
};

}  // namespace dptrain
