// Implements: unit tests of Timeline without MPI: recording (disabled, cap,
// concurrent threads, name truncation), the Chrome trace text of one rank,
// the atomic trace file, and the input reader's "read" events.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/telemetry/timeline.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using json = nlohmann::json;
using Clock = Timeline::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

Clock::time_point at_us(const Timeline& t, std::int64_t us) {
  return Clock::time_point(std::chrono::nanoseconds(t.origin_ns())) + microseconds(us);
}

// The one-rank trace as a JSON array of events.
json events_of(const Timeline& t, const std::string& host = "h") {
  return json::parse("[" + t.serialize(0, host) + "]");
}

std::vector<json> complete_events(const json& events) {
  std::vector<json> out;
  for (const auto& e : events)
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TEST(TimelineTest, DisabledRecordsNothing) {
  Timeline t;
  EXPECT_FALSE(t.enabled());
  t.add("forward", timeline_category::kCompute, 0, Clock::now(), Clock::now(), 3);
  { Timeline::Scope s(t, "backward", timeline_category::kCompute, 0, 3); }
  { Timeline::Scope s(nullptr, "backward", timeline_category::kCompute, 0, 3); }
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.dropped(), 0u);
  EXPECT_TRUE(complete_events(events_of(t)).empty());
}

TEST(TimelineTest, EventsAppearInTheWrittenTrace) {
  const std::string path = testing::scratch_dir("timeline") + "/trace.json";
  Timeline t;
  t.enable(16);
  t.add("read", timeline_category::kInput, kTimelineInputThread, at_us(t, 1000), at_us(t, 3500), 7);
  t.add("before origin", timeline_category::kOther, 9, at_us(t, -2000), at_us(t, -500));
  {
    Timeline::Scope s(t, "forward", timeline_category::kCompute, kTimelineMainThread, 8);
    std::this_thread::sleep_for(milliseconds(3));
  }
  {
    Timeline::Scope s(t, "all-reduce bucket 2", timeline_category_of("all-reduce bucket 2"),
                      kTimelineCommThread);
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_EQ(t.size(), 4u);
  write_trace_file(path, {t.serialize(0, "node-a")}, 1, 0);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const json trace = read_json(path);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_EQ(trace.at("otherData").at("tool"), "dptrain");
  EXPECT_EQ(trace.at("otherData").at("ranks"), 1);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 0);

  const json& all = trace.at("traceEvents");
  std::map<std::string, std::string> meta;  // "process_name" / "thread_name N" -> name
  for (const auto& e : all) {
    if (e.at("ph") != "M") continue;
    EXPECT_EQ(e.at("pid"), 0);
    std::string key = e.at("name");
    if (e.contains("tid")) key += " " + std::to_string(e.at("tid").get<int>());
    meta[key] = e.at("args").contains("name") ? e.at("args").at("name").dump()
                                              : e.at("args").at("sort_index").dump();
  }
  EXPECT_EQ(meta["process_name"], "\"rank 0 (node-a)\"");
  EXPECT_EQ(meta["process_sort_index"], "0");
  EXPECT_EQ(meta["thread_name 0"], "\"main\"");
  EXPECT_EQ(meta["thread_name 1"], "\"input reader\"");
  EXPECT_EQ(meta["thread_name 2"], "\"communication\"");
  EXPECT_EQ(meta["thread_name 9"], "\"thread 9\"");
  EXPECT_EQ(meta.count("thread_name 3"), 0u);

  const auto x = complete_events(all);
  ASSERT_EQ(x.size(), 4u);
  for (const auto& e : x) EXPECT_EQ(e.at("pid"), 0);
  EXPECT_EQ(x[0].at("name"), "read");
  EXPECT_EQ(x[0].at("cat"), "input");
  EXPECT_EQ(x[0].at("tid"), 1);
  EXPECT_DOUBLE_EQ(x[0].at("ts").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(x[0].at("dur").get<double>(), 2500.0);
  EXPECT_EQ(x[0].at("args").at("step"), 7);

  EXPECT_EQ(x[1].at("name"), "before origin");
  EXPECT_DOUBLE_EQ(x[1].at("ts").get<double>(), -2000.0);  // kept, not clamped
  EXPECT_DOUBLE_EQ(x[1].at("dur").get<double>(), 1500.0);
  EXPECT_FALSE(x[1].contains("args"));  // step -1: no args

  EXPECT_EQ(x[2].at("name"), "forward");
  EXPECT_EQ(x[2].at("cat"), "compute");
  EXPECT_EQ(x[2].at("tid"), 0);
  EXPECT_EQ(x[2].at("args").at("step"), 8);
  EXPECT_GE(x[2].at("dur").get<double>(), 3000.0);
  EXPECT_LT(x[2].at("dur").get<double>(), 1e6);

  EXPECT_EQ(x[3].at("name"), "all-reduce bucket 2");
  EXPECT_EQ(x[3].at("cat"), "comm");
  EXPECT_EQ(x[3].at("tid"), 2);
  EXPECT_FALSE(x[3].contains("args"));
  EXPECT_GE(x[3].at("dur").get<double>(), 2000.0);
  // The scopes ran one after the other, on the origin's axis.
  EXPECT_GE(x[2].at("ts").get<double>(), 0.0);
  EXPECT_GE(x[3].at("ts").get<double>(),
            x[2].at("ts").get<double>() + x[2].at("dur").get<double>());
}

TEST(TimelineTest, TheCapDropsAndCountsEvents) {
  Timeline t;
  t.enable(3);
  for (int i = 0; i < 5; ++i)
    t.add("e" + std::to_string(i), timeline_category::kOther, 0, at_us(t, i), at_us(t, i + 1), i);
  { Timeline::Scope s(t, "late", timeline_category::kOther, 0); }
  EXPECT_EQ(t.capacity(), 3u);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.dropped(), 3u);
  const auto x = complete_events(events_of(t));
  ASSERT_EQ(x.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(x[i].at("name"), "e" + std::to_string(i));

  const std::string path = testing::scratch_dir("timeline") + "/capped.json";
  write_trace_file(path, {t.serialize(0, "h")}, 1, t.dropped());
  EXPECT_EQ(read_json(path).at("otherData").at("dropped_events"), 3);
}

TEST(TimelineTest, ConcurrentThreadsLoseNothing) {
  constexpr int kPerThread = 20000;
  Timeline t;
  t.enable(2 * kPerThread);
  auto work = [&t](int tid) {
    for (int i = 0; i < kPerThread; ++i) {
      if (i % 2)
        t.add("add", timeline_category::kOther, tid, Clock::now(), Clock::now(), i);
      else
        Timeline::Scope s(t, "scope", timeline_category::kOther, tid, i);
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(t.size(), 2u * kPerThread);
  EXPECT_EQ(t.dropped(), 0u);
  std::map<int, std::set<int>> steps;
  for (const auto& e : complete_events(events_of(t)))
    steps[e.at("tid").get<int>()].insert(e.at("args").at("step").get<int>());
  ASSERT_EQ(steps.size(), 2u);
  for (int tid : {0, 1}) {
    EXPECT_EQ(steps[tid].size(), static_cast<std::size_t>(kPerThread));
    EXPECT_EQ(*steps[tid].rbegin(), kPerThread - 1);
  }
}

TEST(TimelineTest, LongNamesAreTruncatedNotOverflowed) {
  Timeline t;
  t.enable(4);
  const std::string long_name(200, 'x');
  t.add(long_name, timeline_category::kIo, 5, at_us(t, 0), at_us(t, 1), 11);
  { Timeline::Scope s(t, long_name, timeline_category::kEval, 6, 12); }
  // A two-byte character straddling the cut is dropped whole.
  const std::string utf8 = std::string(38, 'a') + "\xC3\xA9" + "tail";
  t.add(utf8, timeline_category::kIo, 7, at_us(t, 0), at_us(t, 1), 13);

  const auto x = complete_events(events_of(t));
  ASSERT_EQ(x.size(), 3u);
  const std::string cut(TimelineEvent::kNameBytes - 1, 'x');
  EXPECT_EQ(x[0].at("name"), cut);
  EXPECT_EQ(x[1].at("name"), cut);
  EXPECT_EQ(x[2].at("name"), std::string(38, 'a'));
  // The fields after the name are intact.
  EXPECT_EQ(x[0].at("cat"), "io");
  EXPECT_EQ(x[0].at("tid"), 5);
  EXPECT_EQ(x[0].at("args").at("step"), 11);
  EXPECT_EQ(x[1].at("cat"), "eval");
  EXPECT_EQ(x[1].at("tid"), 6);
  EXPECT_EQ(x[1].at("args").at("step"), 12);
  EXPECT_EQ(x[2].at("tid"), 7);
}

TEST(TimelineTest, AnUnwritablePathIsAUsageErrorAndLeavesNoTmp) {
  const std::string dir = testing::scratch_dir("timeline");
  const std::string path = dir + "/missing/trace.json";
  try {
    write_trace_file(path, {}, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("--timeline: cannot write '" + path + "': "),
              std::string::npos)
        << e.what();
  }
  // A directory in the way of the rename: the tmp file is removed.
  const std::string blocked = dir + "/blocked";
  std::filesystem::create_directories(blocked + "/inside");
  EXPECT_THROW(write_trace_file(blocked, {"{}"}, 1, 0), Error);
  EXPECT_FALSE(std::filesystem::exists(blocked + ".tmp"));
}

TEST(TimelineTest, EmptyFragmentsStillMakeValidJson) {
  const std::string path = testing::scratch_dir("timeline") + "/empty.json";
  write_trace_file(path, {"", "{\"ph\":\"M\"}", ""}, 3, 0);
  const json trace = read_json(path);
  EXPECT_EQ(trace.at("traceEvents").size(), 1u);
  EXPECT_EQ(trace.at("otherData").at("ranks"), 3);
}

TEST(TimelineTest, CategoriesOfTrainerPhases) {
  EXPECT_STREQ(timeline_category_of("read"), "input");
  EXPECT_STREQ(timeline_category_of("wait for data"), "input");
  EXPECT_STREQ(timeline_category_of("scatter"), "comm");
  EXPECT_STREQ(timeline_category_of("all-reduce bucket 12"), "comm");
  EXPECT_STREQ(timeline_category_of("forward"), "compute");
  EXPECT_STREQ(timeline_category_of("backward"), "compute");
  EXPECT_STREQ(timeline_category_of("optimizer"), "compute");
  EXPECT_STREQ(timeline_category_of("checkpoint"), "io");
  EXPECT_STREQ(timeline_category_of("log"), "io");
  EXPECT_STREQ(timeline_category_of("evaluation"), "eval");
  EXPECT_STREQ(timeline_category_of("something else"), "other");
}

TEST(TimelineTest, TheInputReaderRecordsOneReadPerBatch) {
  const std::string file = testing::scratch_dir("timeline") + "/data.h5";
  testing::write_fixture(file, {.rows = 50, .chunk_rows = 10});
  Dataset data(file, "train");
  Timeline t;
  t.enable(100);
  InputQueueConfig qc;
  qc.batch_size = 8;  // 7 steps per epoch
  qc.first_step = 3;
  qc.end_step = 12;
  qc.timeline = &t;
  {
    InputQueue q(data, qc);
    while (auto b = q.pop()) q.recycle(std::move(*b));
  }
  const auto x = complete_events(events_of(t));
  ASSERT_EQ(x.size(), 9u);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].at("name"), "read");
    EXPECT_EQ(x[i].at("cat"), "input");
    EXPECT_EQ(x[i].at("tid"), kTimelineInputThread);
    EXPECT_EQ(x[i].at("args").at("step"), 3 + i);
    EXPECT_GE(x[i].at("dur").get<double>(), 0.0);
  }
}

}  // namespace
}  // namespace dptrain
