// Implements: Launch — the MPI session (init/finalize), where each rank runs
// (node, node-local rank, device and backend: make_runtime), and the
// agreement helpers that keep every rank's exit code identical (DESIGN.md
// section 6).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <mpi.h>

#include "dptrain/backend.hpp"
#include "dptrain/comm.hpp"
#include "dptrain/config.hpp"
#include "dptrain/error.hpp"

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

// What a rank computes on: the backend (device, threads) and the
// communicator among the ranks on that backend's memory.
class Watchdog;

struct Runtime {
  std::string backend_name;  // "cpu", "cuda": the factory's name
  int device_index = 0;
  int threads = 1;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
};

// Launch's device choice, agreed across ranks: --device auto means cuda only
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

// Thrown after all ranks agreed on a failure; the rank(s) that failed have
// already printed the message.
class AgreedFailure : public std::exception {
 public:
  explicit AgreedFailure(ExitCode code) : code_(code) {}
  ExitCode code() const noexcept { return code_; }
  const char* what() const noexcept override { return "agreed failure"; }

 private:
  ExitCode code_;
};

// What the main thread is doing, for error messages: set_phase("forward",
// step) in the step loop; phase_note() gives " [phase forward, step 12]" or
// "" before the loop. phase must be a string literal.
void set_phase(const char* phase, std::uint64_t step);
std::string phase_note();

// Prints "dptrain: error: <message>" once, from this rank, prefixed by the
// rank number when there is more than one rank.
void report_error(const std::string& message, int rank, int size);

// Runs f on every rank, then agrees (one all-reduce) on the outcome: if any
// rank threw, the ranks that threw print their message and every rank throws
// AgreedFailure with the largest exit code seen (a usage error outranks a
// generic one). Use before collectives, so no rank is left waiting.
void agree(MPI_Comm comm, const std::function<void()>& f);

}  // namespace dptrain
