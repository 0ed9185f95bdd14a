// Implements: the commands of docs/design.md section 2 besides train:
// evaluation (eval), predictions (predict) and file summaries (inspect).
// Each returns the exit code every rank agrees on.
#pragma once

#include "dptrain/common/error.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"

namespace dptrain {

ExitCode run_eval(const Options& opts, MpiSession& mpi);
ExitCode run_predict(const Options& opts, MpiSession& mpi);
ExitCode run_inspect(const Options& opts, MpiSession& mpi);  // inspect.cpp

}  // namespace dptrain
