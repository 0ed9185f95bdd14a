// Implements: the small typed collectives of the control plane:
// start-up facts that one rank knows and the others need, or that rank 0
// reports for all. Never on the step's hot path.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <mpi.h>

#include "dptrain/common/error.hpp"

namespace dptrain {

// Collective: every rank gets root's value of a trivially copyable T.
template <typename T>
void broadcast_value(MPI_Comm comm, T& value, int root = 0) {
  static_assert(std::is_trivially_copyable_v<T>, "broadcast_value sends raw bytes");
  DPT_MPI_CHECK(MPI_Bcast(&value, static_cast<int>(sizeof(T)), MPI_BYTE, root, comm));
}

// Collective: every rank gets root's string.
void broadcast_string(MPI_Comm comm, std::string& s, int root = 0);

// Collective: every rank's string, in rank order, at root (empty elsewhere).
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root = 0);

// Collective: every rank's string, in rank order, on every rank.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine);

}  // namespace dptrain
