// Implements: MpiSession (see mpi_session.hpp).
#include "dptrain/run/mpi_session.hpp"

namespace dptrain {

MpiSession::MpiSession(int& argc, char**& argv) {
  int provided = 0;
  // Collectives run on the main thread only; MULTIPLE lets the watchdog
  // thread call MPI_Abort when a collective hangs.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_dup(MPI_COMM_WORLD, &world_);
  MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(world_, &rank_);
  MPI_Comm_size(world_, &size_);

  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  // Nodes = number of ranks that are local rank 0.
  int leader = local_rank_ == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, world_);

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, len);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
  MPI_Finalize();
}

std::string MpiSession::mpi_version() const {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, len);
  auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ',' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace dptrain
