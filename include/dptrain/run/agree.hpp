// Implements: agreement on failures, so every rank exits with the same code
// and none is left waiting in a collective (docs/design.md section 6).
#pragma once

#include <exception>
#include <functional>
#include <string>

#include <mpi.h>

#include "dptrain/common/error.hpp"

namespace dptrain {

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

// Prints "dptrain: error: <message>" once, from this rank, prefixed by the
// rank number when there is more than one rank.
void report_error(const std::string& message, int rank, int size);

// Runs f on every rank, then agrees (one all-reduce) on the outcome: if any
// rank threw, the ranks that threw print their message and every rank throws
// AgreedFailure with the largest exit code seen (a usage error outranks a
// generic one). Use before collectives, so no rank is left waiting.
void agree(MPI_Comm comm, const std::function<void()>& f);

}  // namespace dptrain
