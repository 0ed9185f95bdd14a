// Implements: the device choice of make_runtime (see runtime.hpp): which backend each
// rank runs, on which device, with how many threads, and the communicator
// that suits the backend's memory.
#include <sched.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/control_plane.hpp"
#include "dptrain/run/runtime.hpp"
#include "dptrain/run/watchdog.hpp"

namespace dptrain {

namespace {

// Two ranks of a node on one GPU would halve its speed and can deadlock
// NCCL: refuse to start, naming both ranks. UUIDs are exchanged within the
// node (a UUID is 40 characters: "GPU-xxxxxxxx-...").
void check_distinct_gpus(const MpiSession& mpi, int device) {
  const std::string uuid = device_uuid("cuda", device);
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

// This rank's CPUs (its affinity mask) as '0'/'1' per CPU number, without
// trailing zeros; "" when the mask cannot be read.
std::string affinity_bits() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return {};
  std::string bits;
  for (int c = 0; c < CPU_SETSIZE; ++c) bits += CPU_ISSET(c, &mask) ? '1' : '0';
  bits.erase(bits.find_last_not_of('0') + 1);
  return bits;
}

bool overlap(const std::string& a, const std::string& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] == '1' && b[i] == '1') return true;
  return false;
}

// Collective. --threads 0: the CPUs this rank may run on (srun
// --cpus-per-task with task binding, taskset, mpirun --bind-to), split among
// the ranks of its node whose CPUs overlap them: unbound ranks all see the
// same CPUs and share them, bound ranks each use their own.
int default_threads(const MpiSession& mpi) {
  const std::string mine = affinity_bits();
  const std::vector<std::string> masks = allgather_strings(mpi.world(), mine);
  const std::vector<std::string> hosts = allgather_strings(mpi.world(), mpi.host());
  const long cpus = std::count(mine.begin(), mine.end(), '1');
  if (cpus == 0) {  // no mask: the node's cores, split among its ranks
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return std::max(1, static_cast<int>(cores) / std::max(1, mpi.local_size()));
  }
  int sharers = 0;
  for (std::size_t r = 0; r < masks.size(); ++r)
    if (hosts[r] == mpi.host() && overlap(masks[r], mine)) ++sharers;
  return std::max(1, static_cast<int>(cpus / std::max(1, sharers)));
}

}  // namespace

Runtime make_runtime(const Options& opts, const MpiSession& mpi, Watchdog* watchdog) {
  Runtime rt;
  int gpus = 0;
  agree(mpi.world(), [&] { gpus = visible_devices("cuda"); });
  // auto means cuda only when every rank has a GPU, so all towers run alike.
  int min_gpus = gpus;
  DPT_MPI_CHECK(MPI_Allreduce(&gpus, &min_gpus, 1, MPI_INT, MPI_MIN, mpi.world()));
  rt.backend_name = opts.device != "auto" ? opts.device : min_gpus > 0 ? "cuda" : "cpu";
  const bool on_gpu = rt.backend_name == "cuda";
  rt.device_index = on_gpu ? device_for_local_rank(mpi.local_rank(), gpus) : 0;
  rt.threads = opts.threads > 0 ? static_cast<int>(opts.threads) : default_threads(mpi);
  agree(mpi.world(), [&] {
    BackendOptions bo;
    bo.threads = rt.threads;
    bo.device_index = rt.device_index;
    bo.precision = parse_precision(opts.precision);
    bo.attention = parse_attention(opts.attention);
    rt.backend = make_backend(rt.backend_name, bo);
  });
  if (on_gpu) check_distinct_gpus(mpi, rt.device_index);
  Watchdog::Wait wait(watchdog, "communicator set-up", 0);
  agree(mpi.world(),
        [&] { rt.comm = rt.backend->make_communicator(MpiCommHandle{mpi.world()}); });
  return rt;
}

}  // namespace dptrain
