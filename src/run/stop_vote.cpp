// Implements: the stop-signal vote (see stop_vote.hpp).
#include "dptrain/run/stop_vote.hpp"

#include <exception>

#include "dptrain/common/error.hpp"

namespace dptrain {

StopVote::~StopVote() {
  if (request_ == MPI_REQUEST_NULL || std::uncaught_exceptions() > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

void StopVote::start(bool stop_wanted) {
  DPT_REQUIRE(request_ == MPI_REQUEST_NULL, ExitCode::kOther, "stop vote started twice");
  mine_ = stop_wanted ? 1 : 0;
  DPT_MPI_CHECK(MPI_Iallreduce(&mine_, &any_, 1, MPI_INT, MPI_MAX, comm_, &request_));
}

bool StopVote::finish() {
  DPT_REQUIRE(request_ != MPI_REQUEST_NULL, ExitCode::kOther, "stop vote finished before start");
  DPT_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  return any_ != 0;
}

}  // namespace dptrain
