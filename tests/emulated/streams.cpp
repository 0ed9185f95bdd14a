// Implements: the deferred streams and events of streams.hpp. A stream is a
// queue of operations (work, an event's record, a wait for an event's
// record) that runs, in order, only as far as the host or another stream
// needs it (the lazy schedule), or at once unless work queued before it is
// still waiting (the eager one). One recursive lock covers all of it: the
// host may queue from any thread, and running work may queue or run other
// streams' work. A capturing stream's work is recorded in graphs.cpp's
// capture instead, under the same lock.
#include "streams.hpp"

#include "address_ranges.hpp"
#include "graphs.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <utility>

namespace {

using Clock = std::chrono::steady_clock;

// What an event's records have reached; shared with the waits queued on
// it, which may outlive the cudaEvent_t.
struct EventState {
  bool timed = false;
  std::uint64_t recorded = 0;   // records queued
  std::uint64_t completed = 0;  // records run
  cudaStream_t stream = nullptr;  // of the last record
  Clock::time_point at;           // when the last record ran
  std::uint64_t capture = 0;      // the capture the last record went to (graphs.hpp), or 0
};

struct Operation {
  enum Kind { kWork, kRecord, kWait } kind = kWork;
  dptrain_emu::StreamWork work;
  std::shared_ptr<EventState> event;
  std::uint64_t generation = 0;  // the record this is, or waits for
  cudaStream_t source = nullptr;  // the stream of the record waited for
};

}  // namespace

struct CUstreamEmulated {
  std::deque<Operation> queue;
  bool running = false;
};
struct CUeventEmulated {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace dptrain_emu {
namespace {

std::recursive_mutex g_lock;
std::set<cudaStream_t> g_streams;  // the streams made, not the legacy one
AddressRanges g_pinned;  // zero-byte blocks hold one byte

[[noreturn]] void fatal(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}

void run_until(cudaStream_t s, const std::function<bool()>& done);

void execute(Operation& op) {
  switch (op.kind) {
    case Operation::kWork:
      op.work();
      break;
    case Operation::kRecord:
      op.event->completed = op.generation;
      op.event->at = Clock::now();
      break;
    case Operation::kWait: {
      EventState& e = *op.event;
      const std::uint64_t want = op.generation;
      if (e.completed < want) run_until(op.source, [&e, want] { return e.completed >= want; });
      if (e.completed < want) fatal("an event wait can never be satisfied");
      break;
    }
  }
}

// Runs s's operations in order until done() holds or s is empty. A stream
// is never run from inside its own run: a wait only ever needs records
// queued before it, so that would mean the emulator itself is wrong.
void run_until(cudaStream_t s, const std::function<bool()>& done) {
  if (!s) return;
  if (s->running) fatal("a stream was needed while it was running");
  struct Running {  // also when work throws (a CPU plan's error)
    explicit Running(cudaStream_t s) : s(s) { s->running = true; }
    ~Running() { s->running = false; }
    cudaStream_t s;
  } running(s);
  while (!done() && !s->queue.empty()) {
    Operation op = std::move(s->queue.front());
    s->queue.pop_front();
    execute(op);
  }
}

// Late work stays queued under either schedule; other work runs at once
// under the eager one when nothing is queued before it on its stream.
void push(cudaStream_t s, Operation op, bool late = false) {
  if (!s) {  // the legacy stream: now
    execute(op);
    return;
  }
  s->queue.push_back(std::move(op));
  if (!late && eager_schedule() && s->queue.size() == 1 && !s->running)
    run_until(s, [] { return false; });
}

}  // namespace

std::recursive_mutex& streams_lock() { return g_lock; }

bool eager_schedule() {
  static const bool eager = [] {
    const char* v = std::getenv("DPTRAIN_EMULATED_STREAMS");
    return v && std::strcmp(v, "eager") == 0;
  }();
  return eager;
}

cudaStream_t create_stream() {
  const std::lock_guard lock(g_lock);
  auto* s = new CUstreamEmulated;
  g_streams.insert(s);
  return s;
}

void destroy_stream(cudaStream_t s) {
  if (!s) return;
  const std::lock_guard lock(g_lock);
  forget_capture(s);
  run_stream(s);
  g_streams.erase(s);
  delete s;
}

void enqueue(cudaStream_t s, StreamWork work) {
  const std::lock_guard lock(g_lock);
  if (recorded_in_capture(s, work)) return;
  push(s, Operation{Operation::kWork, std::move(work), nullptr, 0, nullptr});
}

void enqueue_late(cudaStream_t s, StreamWork work) {
  const std::lock_guard lock(g_lock);
  if (invalidate_capture_of(s, "work queued late (a collective's result)")) return;
  push(s, Operation{Operation::kWork, std::move(work), nullptr, 0, nullptr}, true);
}

void enqueue_and_run(cudaStream_t s, StreamWork work) {
  const std::lock_guard lock(g_lock);
  if (invalidate_capture_of(s, "work the host waits for (a collective, a blocking copy)")) return;
  bool ran = false;
  enqueue(s, [&ran, w = std::move(work)] {
    w();
    ran = true;
  });
  run_until(s, [&ran] { return ran; });
}

void run_stream(cudaStream_t s) {
  const std::lock_guard lock(g_lock);
  run_until(s, [] { return false; });
}

void run_device() {
  const std::lock_guard lock(g_lock);
  bool more = true;
  while (more) {
    more = false;
    for (cudaStream_t s : g_streams) run_stream(s);
    for (cudaStream_t s : g_streams) more = more || !s->queue.empty();
  }
}

cudaEvent_t create_event(bool timed) {
  auto* e = new CUeventEmulated;
  e->state->timed = timed;
  return e;
}

void destroy_event(cudaEvent_t e) { delete e; }  // queued records keep its state

bool record_event(cudaEvent_t e, cudaStream_t s) {
  const std::lock_guard lock(g_lock);
  EventState& st = *e->state;
  if (const std::uint64_t capture = capture_of(s)) {
    invalidate_capture(capture, "cudaEventRecord on a capturing stream");
    st.capture = capture;
    return false;
  }
  st.capture = 0;
  st.stream = s;
  push(s, Operation{Operation::kRecord, {}, e->state, ++st.recorded, nullptr});
  return true;
}

bool wait_event(cudaStream_t s, cudaEvent_t e) {
  const std::lock_guard lock(g_lock);
  const EventState& st = *e->state;
  const bool by_capturing = invalidate_capture_of(s, "cudaStreamWaitEvent by a capturing stream");
  if (invalidate_capture(st.capture, "cudaStreamWaitEvent for an event recorded in a capture") ||
      by_capturing)
    return false;
  if (st.recorded == 0) return true;  // CUDA: a never-recorded event is complete
  push(s, Operation{Operation::kWait, {}, e->state, st.recorded, st.stream});
  return true;
}

bool run_to_event(cudaEvent_t e) {
  const std::lock_guard lock(g_lock);
  EventState& st = *e->state;
  if (invalidate_capture(st.capture, "cudaEventSynchronize of an event recorded in a capture"))
    return false;
  const std::uint64_t want = st.recorded;
  run_until(st.stream, [&st, want] { return st.completed >= want; });
  return true;
}

bool elapsed_ms(cudaEvent_t from, cudaEvent_t to, float* ms) {
  const std::lock_guard lock(g_lock);
  const EventState &a = *from->state, &b = *to->state;
  if (!a.timed || !b.timed || a.completed == 0 || b.completed == 0 ||
      a.completed < a.recorded || b.completed < b.recorded)
    return false;
  *ms = std::chrono::duration<float, std::milli>(b.at - a.at).count();
  return true;
}

void* pinned_allocate(std::size_t bytes) {
  void* p = ::operator new(bytes ? bytes : 1, std::nothrow);
  if (!p) return nullptr;
  const std::lock_guard lock(g_lock);
  g_pinned.add(p, bytes ? bytes : 1);
  return p;
}

void pinned_free(void* p) {
  if (!p) return;
  const std::lock_guard lock(g_lock);
  g_pinned.remove(p);
  ::operator delete(p);
}

bool is_pinned(const void* p) {
  const std::lock_guard lock(g_lock);
  return g_pinned.contains(p, false);
}

}  // namespace dptrain_emu
