// Implements: the agreement on a stop signal. A rank's
// SIGTERM/SIGUSR1 is voted on by a non-blocking all-reduce started at the top
// of a step and completed at its end, so every rank stops after the same step
// at no cost to the step.
#pragma once

#include <mpi.h>

namespace dptrain {

class StopVote {
 public:
  explicit StopVote(MPI_Comm comm) : comm_(comm) {}
  // A vote still open is completed (the peers are in it), unless an error is
  // unwinding the stack: the job is being aborted then.
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Starts this step's vote with this rank's wish.
  void start(bool stop_wanted);
  // Completes the vote: true when any rank wants to stop.
  bool finish();

 private:
  MPI_Comm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  int mine_ = 0, any_ = 0;
};

}  // namespace dptrain
