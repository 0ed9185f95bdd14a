// Implements: the commands of DESIGN.md section 2 — the training step loop
// (train), evaluation (eval), predictions (predict) and file summaries
// (inspect). Each returns the exit code every rank agrees on.
#pragma once

#include "dptrain/config.hpp"
#include "dptrain/error.hpp"
#include "dptrain/launch.hpp"

namespace dptrain {

ExitCode run_train(const Options& opts, MpiSession& mpi);
ExitCode run_eval(const Options& opts, MpiSession& mpi);
ExitCode run_predict(const Options& opts, MpiSession& mpi);
ExitCode run_inspect(const Options& opts, MpiSession& mpi);

}  // namespace dptrain
