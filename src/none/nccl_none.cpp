// Implements: the NCCL factory of a build without CUDA.
#include "dptrain/comm.hpp"
#include "dptrain/error.hpp"

namespace dptrain {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, Backend&) {
  DPT_REQUIRE(false, ExitCode::kUsage, "NCCL communicator: this dptrain was built without CUDA");
  return nullptr;
}

}  // namespace dptrain
