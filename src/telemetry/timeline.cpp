// Implements: Timeline (fixed-size event store, Scope, the shared time
// origin), its serialization as Chrome trace events, the gather to rank 0
// and the atomic write of the trace file.
#include "dptrain/telemetry/timeline.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

std::int64_t to_ns(Timeline::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Copies name into the fixed field; a cut never splits a UTF-8 sequence, so
// the trace stays valid JSON text.
void copy_name(char (&dst)[TimelineEvent::kNameBytes], std::string_view name) {
  std::size_t n = std::min(name.size(), TimelineEvent::kNameBytes - 1);
  if (n < name.size())
    while (n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  std::memcpy(dst, name.data(), n);
  dst[n] = '\0';
}

std::string thread_name(int tid) {
  static const char* const kNames[] = {"main", "input reader", "communication"};
  if (tid >= 0 && tid < static_cast<int>(std::size(kNames))) return kNames[tid];
  return "thread " + std::to_string(tid);
}

double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Invalid UTF-8 (a caller's odd name) becomes U+FFFD instead of throwing.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

[[noreturn]] void cannot_write(const std::string& path, int err) {
  throw Error(ExitCode::kUsage, "--timeline: cannot write '" + path + "': " + std::strerror(err));
}

}  // namespace

const char* timeline_category_of(std::string_view phase) {
  namespace c = timeline_category;
  if (phase == "read" || phase == "wait for data") return c::kInput;
  if (phase == "scatter" || phase.rfind("all-reduce", 0) == 0) return c::kComm;
  if (phase == "forward" || phase == "backward" || phase == "optimizer") return c::kCompute;
  if (phase == "checkpoint" || phase == "log") return c::kIo;
  if (phase == "evaluation") return c::kEval;
  return c::kOther;
}

// --- recording ----------------------------------------------------------------

void Timeline::enable(std::size_t max_events) {
  std::lock_guard<std::mutex> lock(mu_);
  events_ = std::make_unique<TimelineEvent[]>(max_events);
  capacity_ = max_events;
  count_ = 0;
  dropped_ = 0;
  origin_ns_ = to_ns(Clock::now());
  enabled_ = true;
}

void Timeline::record(std::string_view name, const char* category, int tid,
                      Clock::time_point begin, Clock::time_point end, std::int64_t step) {
  TimelineEvent ev;
  copy_name(ev.name, name);
  ev.category = category;
  ev.tid = tid;
  ev.begin_ns = to_ns(begin);
  ev.end_ns = to_ns(end);
  ev.step = step;
  push(ev);
}

void Timeline::push(const TimelineEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ < capacity_)
    events_[count_++] = ev;
  else
    ++dropped_;
}

std::size_t Timeline::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

std::uint64_t Timeline::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

Timeline::Scope::Scope(Timeline* tl, std::string_view name, const char* category, int tid,
                       std::int64_t step)
    : tl_(tl && tl->enabled() ? tl : nullptr) {
  if (!tl_) return;
  copy_name(ev_.name, name);
  ev_.category = category;
  ev_.tid = tid;
  ev_.step = step;
  ev_.begin_ns = to_ns(Clock::now());
}

Timeline::Scope::~Scope() {
  if (!tl_) return;
  ev_.end_ns = to_ns(Clock::now());
  tl_->push(ev_);  // locks a mutex; cannot throw in practice
}

void Timeline::set_origin_collective(MPI_Comm comm) {
  DPT_MPI_CHECK(MPI_Barrier(comm));
  origin_ns_ = to_ns(Clock::now());
}

// --- output -------------------------------------------------------------------

std::string Timeline::serialize(int rank, const std::string& host) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto append = [&out](const nlohmann::json& j) {
    if (!out.empty()) out += ',';
    out += dump(j);
  };
  append({{"ph", "M"}, {"name", "process_name"}, {"pid", rank},
          {"args", {{"name", "rank " + std::to_string(rank) + " (" + host + ")"}}}});
  append({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank},
          {"args", {{"sort_index", rank}}}});
  std::set<int> tids;
  for (std::size_t i = 0; i < count_; ++i) tids.insert(events_[i].tid);
  for (int tid : tids)
    append({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", tid},
            {"args", {{"name", thread_name(tid)}}}});
  for (std::size_t i = 0; i < count_; ++i) {
    const TimelineEvent& e = events_[i];
    nlohmann::json j = {{"name", e.name},
                        {"cat", e.category ? e.category : timeline_category::kOther},
                        {"ph", "X"},
                        {"ts", to_us(e.begin_ns - origin_ns_)},
                        {"dur", to_us(e.end_ns - e.begin_ns)},
                        {"pid", rank},
                        {"tid", e.tid}};
    if (e.step >= 0) j["args"] = {{"step", e.step}};
    append(j);
  }
  return out;
}

void Timeline::write_collective(MPI_Comm comm, const std::string& path, const std::string& host) {
  int rank = 0, size = 1;
  DPT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DPT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::string mine = serialize(rank, host);

  // Every rank learns every size, so all refuse an oversized gather alike
  // instead of leaving the others blocked in MPI_Gatherv.
  const long long local[2] = {static_cast<long long>(mine.size()),
                              static_cast<long long>(dropped())};
  std::vector<long long> all(2 * static_cast<std::size_t>(size));
  DPT_MPI_CHECK(MPI_Allgather(local, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, comm));
  std::vector<int> counts(size), displs(size);
  long long total = 0;
  std::uint64_t dropped_events = 0;
  for (int r = 0; r < size; ++r) {
    const long long bytes = all[2 * r];
    if (bytes > INT_MAX - total)
      throw Error(ExitCode::kUsage,
                  "--timeline: the trace of ranks 0.." + std::to_string(r) + " exceeds " +
                      std::to_string(INT_MAX) + " bytes, more than one gather carries; record "
                      "fewer events");
    counts[r] = static_cast<int>(bytes);
    displs[r] = static_cast<int>(total);
    total += bytes;
    dropped_events += static_cast<std::uint64_t>(all[2 * r + 1]);
  }

  std::string gathered(rank == 0 ? static_cast<std::size_t>(total) : 0, '\0');
  DPT_MPI_CHECK(MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR,
                            gathered.data(), counts.data(), displs.data(), MPI_CHAR, 0, comm));
  if (rank != 0) return;

  std::vector<std::string_view> fragments;
  for (int r = 0; r < size; ++r)
    fragments.emplace_back(gathered.data() + displs[r], static_cast<std::size_t>(counts[r]));
  write_trace_file(path, fragments, size, dropped_events);
  if (dropped_events > 0)
    std::fprintf(stderr,
                 "dptrain: warning: --timeline kept the first %zu events per rank; %llu were "
                 "dropped\n",
                 capacity_, static_cast<unsigned long long>(dropped_events));
}

void write_trace_file(const std::string& path, const std::vector<std::string_view>& fragments,
                      int ranks, std::uint64_t dropped_events) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) cannot_write(path, errno);
  auto fail = [&](int err) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    cannot_write(path, err);
  };
  auto put = [&](std::string_view s) {
    if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f) != s.size()) fail(errno);
  };

  put("{\"traceEvents\":[\n");
  bool first = true;
  for (std::string_view frag : fragments) {
    if (frag.empty()) continue;
    if (!first) put(",\n");
    put(frag);
    first = false;
  }
  const nlohmann::json other = {
      {"tool", "dptrain"}, {"ranks", ranks}, {"dropped_events", dropped_events}};
  put("\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + dump(other) + "}\n");
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) fail(errno);
  const int closed = std::fclose(f);
  f = nullptr;
  if (closed != 0) fail(errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(errno);
}

}  // namespace dptrain
