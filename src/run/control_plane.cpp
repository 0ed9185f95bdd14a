// Implements: the control-plane collectives (see control_plane.hpp). Strings
// travel as lengths first, then one variable-size gather of the bytes.
#include "dptrain/run/control_plane.hpp"

#include <cstdint>

namespace dptrain {
namespace {

int comm_rank(MPI_Comm comm) {
  int r = 0;
  DPT_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int comm_size(MPI_Comm comm) {
  int n = 1;
  DPT_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

// Splits the concatenated bytes of all ranks by their lengths.
std::vector<std::string> split(const std::vector<char>& bytes, const std::vector<int>& lengths,
                               const std::vector<int>& offsets) {
  std::vector<std::string> out;
  out.reserve(lengths.size());
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out.emplace_back(bytes.data() + offsets[r], static_cast<std::size_t>(lengths[r]));
  return out;
}

std::vector<int> exclusive_sum(const std::vector<int>& v) {
  std::vector<int> offsets(v.size(), 0);
  for (std::size_t r = 1; r < v.size(); ++r) offsets[r] = offsets[r - 1] + v[r - 1];
  return offsets;
}

}  // namespace

void broadcast_string(MPI_Comm comm, std::string& s, int root) {
  std::uint64_t n = s.size();
  broadcast_value(comm, n, root);
  s.resize(n);
  if (n) DPT_MPI_CHECK(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm));
}

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root) {
  const bool at_root = comm_rank(comm) == root;
  const int ranks = comm_size(comm);
  int len = static_cast<int>(mine.size());
  std::vector<int> lengths(at_root ? ranks : 0);
  DPT_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm));
  const std::vector<int> offsets = exclusive_sum(lengths);
  std::vector<char> bytes(at_root && ranks ? offsets.back() + lengths.back() : 0);
  DPT_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, bytes.data(), lengths.data(),
                            offsets.data(), MPI_CHAR, root, comm));
  return at_root ? split(bytes, lengths, offsets) : std::vector<std::string>{};
}

std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine) {
  const int ranks = comm_size(comm);
  int len = static_cast<int>(mine.size());
  std::vector<int> lengths(ranks);
  DPT_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  const std::vector<int> offsets = exclusive_sum(lengths);
  std::vector<char> bytes(static_cast<std::size_t>(offsets.back() + lengths.back()));
  DPT_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, bytes.data(), lengths.data(),
                               offsets.data(), MPI_CHAR, comm));
  return split(bytes, lengths, offsets);
}

}  // namespace dptrain
