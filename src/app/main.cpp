// Implements: the dptrain command. Parses the command line, runs the command
// and turns every failure into one message and one exit code on every rank
// (docs/design.md section 6).
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "app/command_line.hpp"
#include "app/commands.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/test_hooks.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"
#include "dptrain/run/phase.hpp"
#include "dptrain/run/watchdog.hpp"
#include "dptrain/train/trainer.hpp"

using dptrain::ExitCode;

namespace {

ExitCode run(const dptrain::Options& opts, dptrain::MpiSession& mpi) {
  switch (opts.command) {
    case dptrain::Command::kTrain: return dptrain::run_train(opts, mpi);
    case dptrain::Command::kEval: return dptrain::run_eval(opts, mpi);
    case dptrain::Command::kPredict: return dptrain::run_predict(opts, mpi);
    case dptrain::Command::kInspect: return dptrain::run_inspect(opts, mpi);
    case dptrain::Command::kGenerate: return dptrain::run_generate(opts, mpi);
  }
  return ExitCode::kOther;
}

// A failure that was not agreed on may leave peers inside a collective:
// abort the whole job with the code (mpirun exits with it).
[[noreturn]] void abort_job(dptrain::MpiSession& mpi, ExitCode code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, static_cast<int>(code));
  std::_Exit(static_cast<int>(code));
}

}  // namespace

int main(int argc, char** argv) {
  // Slurm may signal a job at any moment: from here on a SIGTERM/SIGUSR1 is
  // kept (pending across a re-exec) and stops training after its first step,
  // instead of killing the rank inside MPI_Init.
  dptrain::hold_stop_signals();
  // DPTRAIN_TEST_SIGNAL_AT_START: to the process, as Slurm sends it (raise()
  // would signal this thread only, which the signal thread never sees).
  if (dptrain::test_hooks::signal_at_start()) kill(getpid(), SIGUSR1);
  // Before MPI starts: an OpenBLAS build may re-execute with the right kernel.
  dptrain::prepare_backends(argv);
  dptrain::start_stop_signal_thread();
  dptrain::MpiSession mpi(argc, argv);
  dptrain::Options opts;
  try {
    // Every rank parses the same argv and files, so every rank reaches the
    // same verdict; only rank 0 speaks.
    opts = dptrain::parse_options(argc, argv);
  } catch (const dptrain::Error& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "dptrain: error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  if (opts.command != dptrain::Command::kTrain) dptrain::default_stop_signals();
  if (!opts.help.empty()) {
    if (mpi.rank() == 0) std::fputs(opts.help.c_str(), stdout);
    return 0;
  }
  try {
    return static_cast<int>(run(opts, mpi));
  } catch (const dptrain::AgreedFailure& e) {
    return static_cast<int>(e.code());
  } catch (const dptrain::Error& e) {
    dptrain::report_error(e.message() + dptrain::phase_note(), mpi.rank(), mpi.size());
    abort_job(mpi, e.code());
  } catch (const std::bad_alloc&) {
    dptrain::report_error("out of memory" + dptrain::phase_note(), mpi.rank(), mpi.size());
    abort_job(mpi, ExitCode::kOther);
  } catch (const std::exception& e) {
    dptrain::report_error(e.what() + dptrain::phase_note(), mpi.rank(), mpi.size());
    abort_job(mpi, ExitCode::kOther);
  }
}
