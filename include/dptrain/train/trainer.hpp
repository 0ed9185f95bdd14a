// Implements: the train command of docs/design.md section 2: the training
// run and its synchronized data-parallel step loop. Returns the exit code
// every rank agrees on.
#pragma once

#include "dptrain/common/error.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"

namespace dptrain {

ExitCode run_train(const Options& opts, MpiSession& mpi);

}  // namespace dptrain
