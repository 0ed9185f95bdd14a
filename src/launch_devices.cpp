// Implements: Launch's device choice (see launch.hpp): which backend each
// rank runs, on which device, with how many threads, and the communicator
// that suits the backend's memory.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "control_plane.hpp"
#include "cuda/cuda_backend.hpp"
#include "dptrain/error.hpp"
#include "dptrain/launch.hpp"

namespace dptrain {

namespace {

Precision parse_precision(const std::string& p) {
  if (p == "tf32") return Precision::kTf32;
  if (p == "bf16") return Precision::kBf16;
  return Precision::kFp32;
}

// Two ranks of a node on one GPU would halve its speed and can deadlock
// NCCL: refuse to start, naming both ranks. UUIDs are exchanged within the
// node (a UUID is 40 characters: "GPU-xxxxxxxx-...").
void check_distinct_gpus(const MpiSession& mpi, int device) {
  const std::string uuid = cuda_device_uuid(device);
  const std::vector<std::string> uuids = allgather_strings(mpi.world(), uuid);
  const std::vector<std::string> hosts = allgather_strings(mpi.world(), mpi.host());
  agree(mpi.world(), [&] {
    if (uuid.empty()) return;
    for (int r = 0; r < mpi.rank(); ++r) {
      if (uuids[r] == uuid && hosts[r] == mpi.host())
        throw Error(ExitCode::kUsage,
                    "ranks " + std::to_string(r) + " and " + std::to_string(mpi.rank()) +
                        " on " + mpi.host() + " share GPU " + uuid +
                        "; start one rank per GPU (e.g. srun --gpus-per-task=1, or fewer ranks)");
    }
  });
}

}  // namespace

Runtime make_runtime(const Options& opts, const MpiSession& mpi) {
  Runtime rt;
  int gpus = 0;
  agree(mpi.world(), [&] { gpus = visible_devices("cuda"); });
  // auto means cuda only when every rank has a GPU, so all towers run alike.
  int min_gpus = gpus;
  DPT_MPI_CHECK(MPI_Allreduce(&gpus, &min_gpus, 1, MPI_INT, MPI_MIN, mpi.world()));
  rt.backend_name = opts.device != "auto" ? opts.device : min_gpus > 0 ? "cuda" : "cpu";
  const bool on_gpu = rt.backend_name == "cuda";
  rt.device_index = on_gpu ? device_for_local_rank(mpi.local_rank(), gpus) : 0;
  if (opts.threads > 0) {
    rt.threads = static_cast<int>(opts.threads);
  } else {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rt.threads = std::max(1, static_cast<int>(cores) / std::max(1, mpi.local_size()));
  }
  agree(mpi.world(), [&] {
    BackendOptions bo;
    bo.threads = rt.threads;
    bo.device_index = rt.device_index;
    bo.precision = parse_precision(opts.precision);
    rt.backend = make_backend(rt.backend_name, bo);
  });
  if (on_gpu) check_distinct_gpus(mpi, rt.device_index);
  agree(mpi.world(), [&] { rt.comm = rt.backend->make_communicator(mpi.world()); });
  return rt;
}

}  // namespace dptrain
