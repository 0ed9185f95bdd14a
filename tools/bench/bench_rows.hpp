// Implements: what the micro-benchmark tools of tools/bench share: timing
// two sides of a row in alternation over MPI ranks (the one that goes first
// swapped every repeat), medians, and the JSON line of a row that
// tools/bench/bench.py reads.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "dptrain/common/error.hpp"

namespace dptrain::bench {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0);
double median(std::vector<double> v);
std::string plural(long n, const char* word);  // "1 repeat", "3 repeats"

// A duplicate of a communicator, so our traffic never matches anyone else's.
class DupComm {
 public:
  explicit DupComm(MPI_Comm parent) { DPT_MPI_CHECK(MPI_Comm_dup(parent, &comm_)); }
  ~DupComm() { MPI_Comm_free(&comm_); }
  DupComm(const DupComm&) = delete;
  DupComm& operator=(const DupComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Waits for every rank of comm without spinning: Open MPI busy-polls in a
// blocking barrier, which would take a core from the rank being timed.
void idle_barrier(MPI_Comm comm);

// One side of a row: prepare (untimed, before the barrier) then run, which
// returns this rank's milliseconds.
struct Side {
  std::function<void()> prepare;
  std::function<double()> run;
};

struct Budget {
  int warmup;      // untimed pairs first; their median time sizes the repeats
  double seconds;  // what a row should take when repeats are not given
  int min_repeats, max_repeats;
};
// b with warmup untimed pairs instead, where warmup >= 0 (--warmup).
Budget with_warmup(Budget b, int warmup);

// How the training-step rows run: --repeats (0: sized to the row's time
// budget), --warmup (< 0: the row's own) and --batch (rows per step).
struct RowRun {
  int repeats = 0, warmup = -1, rows = 128;
};

struct Samples {
  std::vector<double> ours, base;  // ms per repeat, max over ranks (rank 0 only)
  int repeats = 0;
};

// Runs both sides in alternation, the one that goes first swapped every
// repeat so that a drift in machine load falls on both: a barrier before
// each run, the max over ranks after it. repeats <= 0: sized from the
// warm-up to budget.seconds.
Samples alternate(MPI_Comm comm, int repeats, const Budget& budget, const Side& ours,
                  const Side& base);

struct Row {
  std::string name, target, note, status;  // status: set when the row did not run
  double ours = 0, baseline = 0, ratio = 0;
  std::string unit = "ms";
};

// ratio_of(ours_ms, base_ms) per repeat; the row reports medians of each.
Row make_row(std::string name, const Samples& s, double (*ratio_of)(double, double),
             std::string target, std::string note);
// One JSON line on stdout: {"row", "ours", "baseline", "unit", "ratio",
// "target", "note"}, or {"row", "status", "note"}.
void print_row(const Row& r);

double ours_over_base(double ours, double base);
double base_over_ours(double ours, double base);

}  // namespace dptrain::bench
