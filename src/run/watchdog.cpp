// Implements: Watchdog and the stop-signal flag (see watchdog.hpp).
#include "dptrain/run/watchdog.hpp"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The last stop signal received, written by the signal thread.
std::atomic<int> g_stop_signal{0};

}  // namespace

Watchdog::Watchdog(double timeout_s, int rank, int size)
    : timeout_s_(timeout_s), rank_(rank), size_(size), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::enter(const char* phase, std::uint64_t step) {
  step_.store(step, std::memory_order_relaxed);
  since_ns_.store(now_ns(), std::memory_order_relaxed);
  phase_.store(phase, std::memory_order_release);
}

void Watchdog::leave() { phase_.store(nullptr, std::memory_order_release); }

void Watchdog::watch(Communicator* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  comm_ = comm;
}

void Watchdog::run() {
  // Poll often enough that the abort comes within a small fraction of the
  // timeout, rarely enough to cost nothing.
  const auto period = std::chrono::milliseconds(
      static_cast<int>(std::clamp(timeout_s_ * 1000.0 / 20.0, 10.0, 1000.0)));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    // NCCL finds a dead peer or a failed link in the background; the
    // collective that waits for it would otherwise sit out the timeout.
    if (comm_) {
      const std::string error = comm_->async_error();
      if (!error.empty()) {
        const std::string what = comm_->name() + " reported: " + error;
        abort_job(what.c_str());
      }
    }
    const char* phase = phase_.load(std::memory_order_acquire);
    if (!phase) continue;
    const double waited = (now_ns() - since_ns_.load(std::memory_order_relaxed)) / 1e9;
    if (waited < timeout_s_) continue;
    char what[256];
    std::snprintf(what, sizeof what, "no progress for %.0f s in %s at step %llu (--comm-timeout %.0f)",
                  waited, phase, static_cast<unsigned long long>(step_.load()), timeout_s_);
    abort_job(what);
  }
}

void Watchdog::abort_job(const char* what) {
  std::fprintf(stderr, "dptrain: error: [rank %d] %s: a peer rank died or hung; aborting all %d ranks\n",
               rank_, what, size_);
  std::fflush(stderr);
  // Marks the communicator dead and frees nothing: the main thread may be
  // inside a call on it, and ncclCommAbort would free the communicator
  // under it. Every later call there throws instead of entering NCCL.
  if (comm_) comm_->abort();
  // MPI was initialised with MPI_THREAD_MULTIPLE when available, so this
  // thread may call MPI_Abort; mpirun then ends every rank with code 6.
  // _Exit (no destructors, no atexit) in case it returns: the process ends
  // with the main thread wherever it is, and the CUDA driver ends the NCCL
  // kernels with it.
  MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kComm));
  std::_Exit(static_cast<int>(ExitCode::kComm));
}

namespace {

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// The stop signals are never handled on a thread that computes: they stay
// blocked in every thread (the main thread blocks them before any other
// exists, and threads inherit its mask) and one thread takes them with
// sigwait. So no handler ever interrupts a GEMM kernel, a malloc or a
// library's system call, whichever thread the kernel would have picked.
std::atomic<bool> g_signal_thread_started{false};
std::atomic<bool> g_signal_thread_quit{false};
pthread_t g_signal_thread;

void* take_stop_signals(void*) {
  const sigset_t set = stop_signal_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_signal_thread_quit.load()) return nullptr;
    g_stop_signal.store(sig);
  }
}

}  // namespace

void hold_stop_signals() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Idempotent: the thread starts once. A signal held since hold_stop_signals
// (one raised before, or kept across a re-exec) is taken at once.
void start_stop_signal_thread() {
  hold_stop_signals();  // in case a library unblocked them in this thread
  if (g_signal_thread_started.exchange(true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&g_signal_thread, &attr, take_stop_signals, nullptr) != 0) {
    g_signal_thread_started.store(false);
    pthread_attr_destroy(&attr);
    throw Error(ExitCode::kOther, "cannot start the thread that takes SIGTERM and SIGUSR1");
  }
  pthread_attr_destroy(&attr);
}

void default_stop_signals() {
  if (g_signal_thread_started.load()) {
    g_signal_thread_quit.store(true);
    pthread_kill(g_signal_thread, SIGUSR1);  // ends its sigwait; it returns
  }
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
  // One still pending ends the process when unblocked; one the thread took
  // earlier is raised again.
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  if (const int sig = g_stop_signal.load(); sig != 0) std::raise(sig);
}

void announce_stop_signal_handlers() {
  const char* path = std::getenv("DPTRAIN_READY_FILE");
  if (!path || !*path) return;
  if (std::FILE* f = std::fopen(path, "w")) std::fclose(f);
}

bool stop_requested() { return g_stop_signal.load() != 0; }
int stop_signal() { return g_stop_signal.load(); }

}  // namespace dptrain
