// Implements: MpiSession and agree() (see launch.hpp).
#include "dptrain/launch.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <vector>

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

namespace {
std::atomic<const char*> g_phase{nullptr};
std::atomic<std::uint64_t> g_step{0};
}  // namespace

void set_phase(const char* phase, std::uint64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  g_phase.store(phase, std::memory_order_relaxed);
}

std::string phase_note() {
  const char* p = g_phase.load(std::memory_order_relaxed);
  if (!p) return {};
  return std::string(" [phase ") + p + ", step " + std::to_string(g_step.load()) + "]";
}

void report_error(const std::string& message, int rank, int size) {
  if (size > 1)
    std::fprintf(stderr, "dptrain: error: [rank %d] %s\n", rank, message.c_str());
  else
    std::fprintf(stderr, "dptrain: error: %s\n", message.c_str());
  std::fflush(stderr);
}

void agree(MPI_Comm comm, const std::function<void()>& f) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int local = 0;
  std::string message;
  try {
    f();
  } catch (const AgreedFailure& e) {
    local = static_cast<int>(e.code());
  } catch (const Error& e) {
    local = static_cast<int>(e.code());
    message = e.message();
  } catch (const std::bad_alloc&) {
    local = static_cast<int>(ExitCode::kOther);
    message = "out of memory";
  } catch (const std::exception& e) {
    local = static_cast<int>(ExitCode::kOther);
    message = e.what();
  }
  // Codes are small positive numbers; 75 (preempted) is never agreed here.
  int agreed = 0;
  if (MPI_Allreduce(&local, &agreed, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
    agreed = static_cast<int>(ExitCode::kComm);
  if (!message.empty()) report_error(message, rank, size);
  if (agreed != 0) throw AgreedFailure(static_cast<ExitCode>(agreed));
}

}  // namespace dptrain
