// Implements: dptrain_gemm_rate, the GEMM rows of docs/performance.md: the
// fp32 GFLOP/s of the CPU GEMM library this build chose (cpu/cpu_gemm.hpp),
// for the shapes of the demo MLP's step and one large square. bench.py runs
// it from a oneDNN build and from an OpenBLAS build under each kernel the
// CPU supports, so the library choice is measured, not assumed.
//   dptrain_gemm_rate [--threads T]      one JSON line per shape
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_gemm.hpp"

namespace {

struct Shape {
  int m, n, k;
  bool ta, tb;
};

// Median GFLOP/s over 5 timed batches of calls, each about 0.2 s.
double gflops(const Shape& s) {
  const int rows_a = s.ta ? s.k : s.m, cols_a = s.ta ? s.m : s.k;
  const int rows_b = s.tb ? s.n : s.k, cols_b = s.tb ? s.k : s.n;
  std::vector<float> a(std::size_t(rows_a) * cols_a), b(std::size_t(rows_b) * cols_b),
      c(std::size_t(s.m) * s.n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  auto call = [&] {
    dptrain::cpu_gemm::sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), cols_a, b.data(), cols_b,
                             0.0f, c.data(), s.n);
  };
  using Clock = std::chrono::steady_clock;
  const auto w0 = Clock::now();
  int calls = 0;
  while (std::chrono::duration<double>(Clock::now() - w0).count() < 0.2 || calls < 3) {
    call();
    ++calls;
  }
  std::vector<double> rates;
  for (int batch = 0; batch < 5; ++batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(2.0 * s.m * s.n * s.k * calls / sec / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  dptrain::cpu_gemm::prepare(argv);
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: dptrain_gemm_rate [--threads T]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);
  dptrain::cpu_gemm::set_threads(threads);
  // The demo MLP's forward (N/T), weight-gradient (T/N) and input-gradient
  // (N/N) GEMMs on a 128-row and a 64-row shard, and a large square.
  const Shape shapes[] = {{128, 256, 784, false, true}, {256, 784, 128, true, false},
                          {128, 784, 256, false, false}, {64, 256, 784, false, true},
                          {1024, 1024, 1024, false, false}};
  for (const Shape& s : shapes) {
    nlohmann::json row = {{"shape", std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                        std::to_string(s.k)},
                          {"op", std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N")},
                          {"threads", threads},
                          {"library", dptrain::cpu_gemm::describe()},
                          {"gflops", gflops(s)}};
    std::printf("%s\n", row.dump().c_str());
  }
  return 0;
}
