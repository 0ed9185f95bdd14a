// Implements: the shared timing and output of the micro-benchmark tools
// (bench_rows.hpp).
#include "bench_rows.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

namespace dptrain::bench {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string plural(long n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void idle_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  DPT_MPI_CHECK(MPI_Ibarrier(comm, &req));
  for (int done = 0;;) {
    DPT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Budget with_warmup(Budget b, int warmup) {
  if (warmup >= 0) b.warmup = warmup;
  return b;
}

Samples alternate(MPI_Comm comm, int repeats, const Budget& budget, const Side& ours,
                  const Side& base) {
  auto timed = [comm](const Side& side) {
    if (side.prepare) side.prepare();
    DPT_MPI_CHECK(MPI_Barrier(comm));
    const double local = side.run();
    double max = 0.0;
    DPT_MPI_CHECK(MPI_Reduce(&local, &max, 1, MPI_DOUBLE, MPI_MAX, 0, comm));
    return max;
  };
  std::vector<double> pair_ms;  // wall time of each warm-up pair, barriers included
  for (int i = 0; i < budget.warmup; ++i) {
    const auto t0 = Clock::now();
    timed(ours);
    timed(base);
    pair_ms.push_back(ms_since(t0));
  }
  Samples s;
  s.repeats = repeats;
  if (s.repeats <= 0) {  // rank 0's estimate, so that every rank runs as many
    const double pair = pair_ms.empty() ? 1.0 : median(pair_ms);
    s.repeats = std::clamp(static_cast<int>(budget.seconds * 1e3 / std::max(pair, 1e-3)),
                           budget.min_repeats, budget.max_repeats);
    DPT_MPI_CHECK(MPI_Bcast(&s.repeats, 1, MPI_INT, 0, comm));
  }
  for (int r = 0; r < s.repeats; ++r) {
    if (r % 2 == 0) {
      s.ours.push_back(timed(ours));
      s.base.push_back(timed(base));
    } else {
      s.base.push_back(timed(base));
      s.ours.push_back(timed(ours));
    }
  }
  return s;
}

Row make_row(std::string name, const Samples& s, double (*ratio_of)(double, double),
             std::string target, std::string note) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < s.ours.size(); ++i) ratios.push_back(ratio_of(s.ours[i], s.base[i]));
  return {std::move(name), std::move(target),
          std::move(note) + "; medians of " + plural(s.repeats, "repeat") + " after warm-up",
          "", median(s.ours), median(s.base), median(ratios)};
}

void print_row(const Row& r) {
  using nlohmann::json;
  const std::string name = json(r.name).dump(), note = json(r.note).dump();
  if (!r.status.empty()) {
    std::printf("{\"row\":%s,\"status\":%s,\"note\":%s}\n", name.c_str(), json(r.status).dump().c_str(),
                note.c_str());
  } else {
    std::printf("{\"row\":%s,\"ours\":%.6g,\"baseline\":%.6g,\"unit\":%s,\"ratio\":%.4g,"
                "\"target\":%s,\"note\":%s}\n",
                name.c_str(), r.ours, r.baseline, json(r.unit).dump().c_str(), r.ratio,
                json(r.target).dump().c_str(), note.c_str());
  }
  std::fflush(stdout);
}

double ours_over_base(double ours, double base) { return ours / base; }
double base_over_ours(double ours, double base) { return base / ours; }

}  // namespace dptrain::bench
