// Implements: report_error and agree() (see agree.hpp).
#include "dptrain/run/agree.hpp"

#include <cstdio>
#include <new>

namespace dptrain {

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
