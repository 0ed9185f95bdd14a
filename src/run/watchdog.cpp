// Implements: Watchdog and the stop-signal flag (see watchdog.hpp).
#include "dptrain/run/watchdog.hpp"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
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

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

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
void set_stop_signal_mask(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(how, &set, nullptr);
}
}  // namespace

void hold_stop_signals() { set_stop_signal_mask(SIG_BLOCK); }

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  // A signal held by hold_stop_signals() is delivered now, to the handler.
  set_stop_signal_mask(SIG_UNBLOCK);
}

void default_stop_signals() {
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
  if (g_stop_signal != 0) std::raise(g_stop_signal);
}

void announce_stop_signal_handlers() {
  const char* path = std::getenv("DPTRAIN_READY_FILE");
  if (!path || !*path) return;
  if (std::FILE* f = std::fopen(path, "w")) std::fclose(f);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }

}  // namespace dptrain
