// Implements: the typed error every piece throws, the docs/design.md exit codes,
// and check macros for MPI and HDF5 calls (CUDA/cuBLAS/NCCL macros live in
// src/backends/cuda/ so that no CUDA header leaks into public headers).
#pragma once

#include <stdexcept>
#include <string>

namespace dptrain {

// docs/design.md section 6. Every rank exits with one of these.
enum class ExitCode : int {
  kOk = 0,
  kOther = 1,
  kUsage = 2,
  kData = 3,
  kCheckpoint = 4,
  kNumeric = 5,
  kComm = 6,
  kPreempted = 75,
};

// One error type, the exit code it maps to, and where it happened
// ("file.cpp:42", or a data file and dataset).
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what, std::string where = {})
      : std::runtime_error(what), code_(code), where_(std::move(where)) {}
  ExitCode code() const noexcept { return code_; }
  const std::string& where() const noexcept { return where_; }
  // "what (where)" as printed after "dptrain: error: ".
  std::string message() const {
    return where_.empty() ? std::string(what()) : std::string(what()) + " (" + where_ + ")";
  }

 private:
  ExitCode code_;
  std::string where_;
};

[[noreturn]] void throw_error(ExitCode code, const std::string& what, const char* file, int line);
// The one usage error of every option parser that takes a name:
// Error(kUsage) "--<option> '<value>' is not one of: <choices>".
[[noreturn]] void throw_bad_choice(const char* option, const std::string& value,
                                   const char* choices);

}  // namespace dptrain

#define DPT_STRINGIFY2(x) #x
#define DPT_STRINGIFY(x) DPT_STRINGIFY2(x)

// Throws dptrain::Error with the code and file:line when cond is false.
#define DPT_REQUIRE(cond, code, msg)                                  \
  do {                                                                \
    if (!(cond)) ::dptrain::throw_error((code), (msg), __FILE__, __LINE__); \
  } while (0)

// MPI calls: MPI_ERRORS_RETURN is set on our communicators, so a failing
// call returns here and becomes an exit-6 error naming the call.
#define DPT_MPI_CHECK(call)                                                       \
  do {                                                                            \
    int dpt_mpi_rc_ = (call);                                                     \
    if (dpt_mpi_rc_ != 0)                                                         \
      ::dptrain::throw_error(::dptrain::ExitCode::kComm,                          \
                             std::string("MPI call failed: ") + #call + " (code " + \
                                 std::to_string(dpt_mpi_rc_) + ")",               \
                             __FILE__, __LINE__);                                 \
  } while (0)
