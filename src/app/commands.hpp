// Implements: the commands of docs/design.md section 2 besides train:
// evaluation (eval), predictions (predict), file summaries (inspect) and
// text from a language model (generate).
// Each returns the exit code every rank agrees on.
#pragma once

#include "dptrain/common/error.hpp"
#include "dptrain/run/mpi_session.hpp"
#include "dptrain/run/options.hpp"

namespace dptrain {

ExitCode run_eval(const Options& opts, MpiSession& mpi);
ExitCode run_predict(const Options& opts, MpiSession& mpi);
ExitCode run_inspect(const Options& opts, MpiSession& mpi);   // inspect.cpp
ExitCode run_generate(const Options& opts, MpiSession& mpi);  // generate.cpp

}  // namespace dptrain
