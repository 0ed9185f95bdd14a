// Implements: the never-hang guarantee (docs/design.md section 6, --comm-timeout).
// The main thread marks each wait on peers (communicator set-up, scatter,
// all-reduce, eval, checkpoint broadcast) with a Watchdog::Wait; a background
// thread aborts the whole job with exit 6 when one lasts longer than the
// timeout, naming the rank, step and phase, or as soon as the watched
// communicator reports an asynchronous error (NCCL: a peer died, the network
// failed). Also the SIGTERM/SIGUSR1 flag behind preemption.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace dptrain {

class Communicator;

// Made before the runtime, so that a hang while the communicator is set up
// (ncclCommInitRank waiting for a peer) is aborted too.
class Watchdog {
 public:
  Watchdog(double timeout_s, int rank, int size);
  ~Watchdog();  // stops the thread; never throws
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // While a Watching lives, the thread polls comm->async_error() every
  // period and, before it aborts the job, calls comm->abort(), which only
  // marks the communicator dead: freeing it stays with its owner, the main
  // thread, which may be inside a call on it at that moment. The job then
  // ends by MPI_Abort and _Exit, and the driver ends the NCCL kernels with
  // the process. Make the Watching after the communicator and let it go
  // before it (the destructor waits out a poll in progress).
  class Watching {
   public:
    Watching(Watchdog* w, Communicator* comm) : w_(w) {
      if (w_) w_->watch(comm);
    }
    ~Watching() {
      if (w_) w_->watch(nullptr);
    }
    Watching(const Watching&) = delete;
    Watching& operator=(const Watching&) = delete;

   private:
    Watchdog* w_;
  };

  // Marks a wait on peers; phase must be a string literal.
  class Wait {
   public:
    Wait(Watchdog* w, const char* phase, std::uint64_t step) : w_(w) {
      if (w_) w_->enter(phase, step);
    }
    ~Wait() {
      if (w_) w_->leave();
    }
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;

   private:
    Watchdog* w_;
  };

  void enter(const char* phase, std::uint64_t step);
  void leave();
  void watch(Communicator* comm);  // under the lock the thread polls with

 private:
  void run();
  [[noreturn]] void abort_job(const char* what);  // on the thread, lock held

  double timeout_s_;
  int rank_, size_;
  Communicator* comm_ = nullptr;  // guarded by mu_
  std::atomic<const char*> phase_{nullptr};
  std::atomic<std::uint64_t> step_{0};
  std::atomic<std::int64_t> since_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// SIGTERM and SIGUSR1 set a flag; the step loop agrees on it at a step
// boundary, so a signal that came during start-up stops the run after its
// first step. main() holds the two signals (blocked, so one that comes stays
// pending, across a re-exec too) before MPI starts or any thread exists:
// Slurm may signal a job at any moment. They stay blocked in every thread;
// start_stop_signal_thread() starts one thread that takes them with sigwait and sets the
// flag (so no handler ever runs on a computing thread), and is idempotent.
void hold_stop_signals();
void start_stop_signal_thread();
// For commands that do not checkpoint: the signals' default action again (a
// signal already caught is raised again, so it ends the process now).
void default_stop_signals();
// Rank 0, once every rank has started its signal thread: creates the file named
// by the environment variable DPTRAIN_READY_FILE, if set. A job script
// forwards a signal to the ranks only then (before, it would kill a rank
// still loading), e.g. jobs/slurm_job.sh.
void announce_stop_signal_handlers();
bool stop_requested();
int stop_signal();  // the last signal received, 0 if none

}  // namespace dptrain
