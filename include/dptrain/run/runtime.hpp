// Implements: where each rank runs (make_runtime): its backend, device and
// threads, and the communicator that suits the backend's memory.
#pragma once

#include <memory>
#include <string>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"

namespace dptrain {

class Watchdog;

// What a rank computes on: the backend (device, threads) and the
// communicator among the ranks on that backend's memory.
struct Runtime {
  std::string backend_name;  // "cpu", "cuda": the factory's name
  int device_index = 0;
  int threads = 1;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
};

// The device choice, agreed across ranks: --device auto means cuda only
// when every rank sees a GPU (so all towers run alike); rank r of a node
// takes GPU r mod (visible GPUs), and two ranks on one GPU are refused;
// --threads 0 means the CPUs of this rank's affinity mask, divided by the
// ranks of its node whose masks overlap it (unbound ranks split the node).
// A watchdog, when given, aborts the job when the communicator's set-up
// (ncclCommInitRank, which waits for every peer) takes longer than its timeout.
Runtime make_runtime(const Options& opts, const MpiSession& mpi, Watchdog* watchdog = nullptr);

// The device a rank uses: its rank among the ranks of its node, modulo the
// devices it sees (never the global rank, which counts the other nodes too).
inline int device_for_local_rank(int local_rank, int visible_devices) {
  return visible_devices > 0 ? local_rank % visible_devices : 0;
}

}  // namespace dptrain
