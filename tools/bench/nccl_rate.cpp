// Implements: dptrain_nccl_rate (CUDA builds only), the all-reduce row of
// tools/gpu-check.sh: the bus bandwidth of dptrain's NCCL communicator
// (Communicator::allreduce_sum of the CUDA backend: its own stream, ordered
// after and before the compute stream by events) against a bare
// ncclAllReduce of the same buffer on a plain stream, timed in alternation.
// Rank 0 prints one JSON line per size, like dptrain_bench. Bus bandwidth as
// nccl-tests defines it: bytes * 2 (P - 1) / P / time.
// Usage: mpirun -n P dptrain_nccl_rate [--mib 1,16,256] [--repeats 20]
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/error_cuda.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;  // alternations; the row reports the median round

struct Args {
  std::vector<double> mib{1, 16, 256};
  int repeats = 20;  // all-reduces per timed round
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    DPT_REQUIRE(i + 1 < argc, dptrain::ExitCode::kUsage, arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--repeats") {
      a.repeats = std::max(1, std::atoi(value.c_str()));
    } else if (arg == "--mib") {
      a.mib.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) a.mib.push_back(std::atof(item.c_str()));
    } else {
      throw dptrain::Error(dptrain::ExitCode::kUsage, "unknown option " + arg +
                                                          " (--mib LIST, --repeats N)");
    }
  }
  return a;
}

// Milliseconds per all-reduce of one round, the slowest rank's.
double timed_round(int repeats, const std::function<void()>& reduce,
                   const std::function<void()>& drain) {
  DPT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const auto t0 = Clock::now();
  for (int r = 0; r < repeats; ++r) reduce();
  drain();
  const double local = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / repeats;
  double slowest = 0.0;
  DPT_MPI_CHECK(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// NCCL's own communicator and stream, made the way nccl-tests makes them.
struct BareNccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  BareNccl(int rank, int size, int device) {
    DPT_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id{};
    if (rank == 0) DPT_NCCL_CHECK(ncclGetUniqueId(&id));
    DPT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    DPT_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
    DPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~BareNccl() {
    if (stream) cudaStreamSynchronize(stream), cudaStreamDestroy(stream);
    if (comm) ncclCommDestroy(comm);
  }
  BareNccl(const BareNccl&) = delete;
  BareNccl& operator=(const BareNccl&) = delete;
};

void print_row(double mib, int size, double ours_ms, double nccl_ms) {
  const double bytes = mib * 1048576.0, factor = 2.0 * (size - 1) / size;
  const double ours_bw = bytes * factor / (ours_ms * 1e6), nccl_bw = bytes * factor / (nccl_ms * 1e6);
  std::printf("{\"row\":\"all-reduce %g MiB\",\"ranks\":%d,\"ours\":%.6g,\"baseline\":%.6g,"
              "\"unit\":\"ms\",\"ours_busbw_gbs\":%.4g,\"nccl_busbw_gbs\":%.4g,\"ratio\":%.4g,"
              "\"target\":\">= 0.9\",\"note\":\"ratio = dptrain bus bandwidth / bare "
              "ncclAllReduce of the same buffer; median of %d alternations\"}\n",
              mib, size, ours_ms, nccl_ms, ours_bw, nccl_bw, size > 1 ? ours_bw / nccl_bw : 0.0,
              kRounds);
  std::fflush(stdout);
}

int run(const dptrain::MpiSession& mpi, const Args& args) {
  const int gpus = dptrain::cuda_visible_devices();
  DPT_REQUIRE(gpus > 0, dptrain::ExitCode::kUsage, "no GPU visible");
  dptrain::BackendOptions bo;
  bo.device_index = mpi.local_rank() % gpus;
  auto be = dptrain::make_backend("cuda", bo);
  auto comm = be->make_communicator(dptrain::MpiCommHandle{MPI_COMM_WORLD});
  BareNccl bare(mpi.rank(), mpi.size(), bo.device_index);
  for (double mib : args.mib) {
    const std::size_t n = std::max<std::size_t>(1, static_cast<std::size_t>(mib * 262144.0));
    dptrain::DeviceBuffer<float> buf(*be, n);
    be->synchronize();
    auto ours = [&] { comm->allreduce_sum(buf.get(), n); };
    auto ours_drain = [&] { be->synchronize(); };
    auto base = [&] {
      DPT_NCCL_CHECK(ncclAllReduce(buf.get(), buf.get(), n, ncclFloat, ncclSum, bare.comm, bare.stream));
    };
    auto base_drain = [&] { DPT_CUDA_CHECK(cudaStreamSynchronize(bare.stream)); };
    timed_round(2, ours, ours_drain);  // warm-up: NCCL connects on first use
    timed_round(2, base, base_drain);
    std::vector<double> ours_ms, base_ms;
    for (int r = 0; r < kRounds; ++r) {
      ours_ms.push_back(timed_round(args.repeats, ours, ours_drain));
      base_ms.push_back(timed_round(args.repeats, base, base_drain));
    }
    if (mpi.rank() == 0) print_row(mib, mpi.size(), median(ours_ms), median(base_ms));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dptrain::MpiSession mpi(argc, argv);
  try {
    return run(mpi, parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dptrain_nccl_rate: error: [rank %d] %s\n", mpi.rank(), e.what());
    std::fflush(stderr);
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
