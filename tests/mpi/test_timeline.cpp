// Implements: MPI tests of Timeline's collectives: rank 0's trace holds every
// rank as a process with its own events, all on one time axis (ranks that
// start seconds apart still agree after set_origin_collective), and dropped
// events are summed over ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.hpp"
#include "dptrain/telemetry/timeline.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using json = nlohmann::json;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A scratch path made on rank 0 and sent to all (only rank 0 writes there).
std::string shared_path(const std::string& name) {
  std::string dir = world_rank() == 0 ? testing::scratch_dir("timeline-mpi") : std::string();
  int n = static_cast<int>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(n);
  MPI_Bcast(dir.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir + "/" + name;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TEST(TimelineMpiTest, EveryRankIsAProcessOnOneTimeAxis) {
  const int rank = world_rank(), size = world_size();
  const std::string path = shared_path("trace.json");
  Timeline t;
  t.enable(64);
  // Ranks reach the origin at very different times; the barrier inside
  // set_origin_collective must line them up anyway.
  std::this_thread::sleep_for(std::chrono::milliseconds(150 * rank));
  t.set_origin_collective(MPI_COMM_WORLD);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  MPI_Barrier(MPI_COMM_WORLD);
  { Timeline::Scope s(t, "after barrier", timeline_category::kOther, kTimelineMainThread, 0); }
  for (int i = 0; i <= rank; ++i) {
    Timeline::Scope s(t, "work " + std::to_string(rank), timeline_category::kCompute,
                      kTimelineCommThread, i + 1);
  }
  t.write_collective(MPI_COMM_WORLD, path, "host" + std::to_string(rank));
  if (rank != 0) return;

  const json trace = read_json(path);
  EXPECT_EQ(trace.at("otherData").at("ranks"), size);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 0);
  std::map<int, std::string> process_names;
  std::map<int, int> work_events;
  std::map<int, double> after_barrier_ts;
  for (const auto& e : trace.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_names[pid] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "after barrier") after_barrier_ts[pid] = e.at("ts");
    if (e.at("name") == "work " + std::to_string(pid)) {
      EXPECT_EQ(e.at("tid"), kTimelineCommThread);
      ++work_events[pid];
    }
  }
  ASSERT_EQ(process_names.size(), static_cast<std::size_t>(size));
  ASSERT_EQ(after_barrier_ts.size(), static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(process_names[r], "rank " + std::to_string(r) + " (host" + std::to_string(r) + ")");
    EXPECT_EQ(work_events[r], r + 1);
    EXPECT_GE(after_barrier_ts[r], 15e3);  // µs after the origin
    EXPECT_LT(std::fabs(after_barrier_ts[r] - after_barrier_ts[0]), 50e3);
  }
}

TEST(TimelineMpiTest, DroppedEventsAreSummedAndReportedOnce) {
  const int rank = world_rank(), size = world_size();
  const std::string path = shared_path("dropped.json");
  Timeline t;
  t.enable(2);
  t.set_origin_collective(MPI_COMM_WORLD);
  for (int i = 0; i < 3 + rank; ++i)
    t.add("e", timeline_category::kOther, 0, Timeline::Clock::now(), Timeline::Clock::now(), i);
  EXPECT_EQ(t.dropped(), static_cast<std::uint64_t>(1 + rank));
  ::testing::internal::CaptureStderr();
  t.write_collective(MPI_COMM_WORLD, path, "h");
  const std::string err = ::testing::internal::GetCapturedStderr();
  const int expected = size * (size + 1) / 2;  // sum of 1 + r
  if (rank != 0) {
    EXPECT_EQ(err, "");
    return;
  }
  EXPECT_EQ(err, "dptrain: warning: --timeline kept the first 2 events per rank; " +
                     std::to_string(expected) + " were dropped\n");
  const json trace = read_json(path);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), expected);
  int kept = 0;
  for (const auto& e : trace.at("traceEvents")) kept += e.at("ph") == "X";
  EXPECT_EQ(kept, 2 * size);
}

TEST(TimelineMpiTest, AWriteFailureThrowsOnRankZeroOnly) {
  const int rank = world_rank();
  const std::string path = shared_path("missing/trace.json");
  Timeline t;
  t.enable(4);
  { Timeline::Scope s(t, "x", timeline_category::kOther, 0); }
  if (rank == 0) {
    EXPECT_THROW(t.write_collective(MPI_COMM_WORLD, path, "h"), Error);
  } else {
    EXPECT_NO_THROW(t.write_collective(MPI_COMM_WORLD, path, "h"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace dptrain
