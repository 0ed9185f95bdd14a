// Implements: --timeline FILE, a recorder of timed phases (read, scatter,
// forward, backward, all-reduce buckets, ...) on every rank and thread, and
// the collective that gathers them into one Chrome trace ("complete" events,
// one process per rank) for chrome://tracing or ui.perfetto.dev.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <mpi.h>

namespace dptrain {

// Trace threads ("tid"): names come from a table, others show as "thread N".
constexpr int kTimelineMainThread = 0;
constexpr int kTimelineInputThread = 1;
constexpr int kTimelineCommThread = 2;

// Categories ("cat"), so a viewer can filter by kind of work.
namespace timeline_category {
constexpr const char* kInput = "input";      // read, wait for data
constexpr const char* kComm = "comm";        // scatter, all-reduce bucket K
constexpr const char* kCompute = "compute";  // forward, backward, optimizer
constexpr const char* kIo = "io";            // checkpoint, log
constexpr const char* kEval = "eval";        // evaluation
constexpr const char* kOther = "other";
}  // namespace timeline_category

// The category of a trainer phase name ("all-reduce bucket 3" -> comm);
// kOther for names it does not know. Returns a string literal.
const char* timeline_category_of(std::string_view phase);

// One recorded interval. Fixed size, so recording never allocates.
struct TimelineEvent {
  static constexpr std::size_t kNameBytes = 40;
  char name[kNameBytes];  // NUL-terminated, truncated at a UTF-8 boundary
  const char* category;   // a string literal
  int tid;
  std::int64_t begin_ns, end_ns;  // steady_clock since its epoch
  std::int64_t step;              // -1: none
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Disabled: add() returns after one branch and Scope reads no clock.
  Timeline() = default;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Reserves room for max_events and starts recording; later events are
  // counted as dropped. Call before any thread records. The time origin is
  // now until set_origin_collective moves it.
  void enable(std::size_t max_events);
  bool enabled() const { return enabled_; }

  // Records [begin, end) of `name` (copied, truncated to 39 bytes).
  // Thread-safe; never allocates.
  void add(std::string_view name, const char* category, int tid, Clock::time_point begin,
           Clock::time_point end, std::int64_t step = -1) {
    if (!enabled_) return;
    record(name, category, tid, begin, end, step);
  }

  // Records its own lifetime [construction, destruction); a null or
  // disabled timeline makes it a no-op.
  class Scope {
   public:
    Scope(Timeline* tl, std::string_view name, const char* category, int tid,
          std::int64_t step = -1);
    Scope(Timeline& tl, std::string_view name, const char* category, int tid,
          std::int64_t step = -1)
        : Scope(&tl, name, category, tid, step) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline* tl_;
    TimelineEvent ev_;
  };

  // Collective: MPI_Barrier, then every rank takes its time zero. Ranks
  // leave a barrier at slightly different moments (microseconds on one
  // node, tens of microseconds across a fabric), and steady clocks drift by
  // a few ppm, so cross-rank alignment is that good and no better. Events
  // recorded before the origin keep their negative timestamps (nothing is
  // clamped, durations stay true); call it once, at the start of training.
  void set_origin_collective(MPI_Comm comm);

  // Collective: gathers every rank's events to rank 0, which writes the
  // trace to path atomically (path.tmp, fsync, rename) and warns on stderr
  // when events were dropped. host names rank r's process ("rank r (host)").
  // Every rank throws the same Error when a rank's events exceed what one
  // MPI_Gatherv carries (INT_MAX bytes in all). A failed write throws on
  // rank 0 only (exit 2, "--timeline: cannot write ..."); the caller agrees
  // with the peers.
  void write_collective(MPI_Comm comm, const std::string& path, const std::string& host);

  // This rank's events and metadata as comma-separated Chrome trace JSON
  // objects (no brackets), pid = rank. What write_collective gathers.
  std::string serialize(int rank, const std::string& host) const;

  std::size_t size() const;           // events kept
  std::size_t capacity() const { return capacity_; }
  std::uint64_t dropped() const;      // events refused because the store was full
  std::int64_t origin_ns() const { return origin_ns_; }

 private:
  void record(std::string_view name, const char* category, int tid, Clock::time_point begin,
              Clock::time_point end, std::int64_t step);
  void push(const TimelineEvent& ev);

  bool enabled_ = false;
  std::size_t capacity_ = 0;
  std::int64_t origin_ns_ = 0;
  mutable std::mutex mu_;
  std::unique_ptr<TimelineEvent[]> events_;
  std::size_t count_ = 0;
  std::uint64_t dropped_ = 0;
};

// Writes {"traceEvents":[fragments...],"displayTimeUnit":"ms","otherData":
// {...}} to path through path.tmp (fflush, fsync, rename). Empty fragments
// are skipped. Throws Error(kUsage, "--timeline: cannot write ...").
void write_trace_file(const std::string& path, const std::vector<std::string_view>& fragments,
                      int ranks, std::uint64_t dropped_events);

}  // namespace dptrain
