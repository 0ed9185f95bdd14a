// Implements: dptrain_input_bench, the input path alone (no compute): one
// epoch of the trainer's own pieces (ReaderGroup, Dataset, InputQueue,
// InputPipeline: prefetch, the scatter inside each reader's group, the
// shard's conversion to float) for one --input-readers choice, against the
// raw read bandwidth of the same file (H5Dread of the features in 64 MiB
// slabs, one process). Rank 0 prints one JSON line; docs/scaling.md turns
// them into where rank 0's reading stops keeping up.
// Usage: mpiexec -n P dptrain_input_bench --data FILE [--readers rank0|node|all]
//            [--batch B] [--epochs E] [--cache-mb M] [--shuffle none|block|full] [--prefetch K]
//            [--repeats R]   (best of R runs of each side; the default --cache-mb 0 streams)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/input_readers.hpp"
#include "dptrain/data/sample_order.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace dptrain {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string data, readers = "rank0", shuffle = "block";
  std::uint64_t batch = 256, epochs = 1, cache_mb = 0, prefetch = 4, repeats = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--data") a.data = v;
    else if (k == "--readers") a.readers = v;
    else if (k == "--shuffle") a.shuffle = v;
    else if (k == "--batch") a.batch = std::stoull(v);
    else if (k == "--epochs") a.epochs = std::stoull(v);
    else if (k == "--cache-mb") a.cache_mb = std::stoull(v);
    else if (k == "--prefetch") a.prefetch = std::stoull(v);
    else if (k == "--repeats") a.repeats = std::max<std::uint64_t>(1, std::stoull(v));
    else throw Error(ExitCode::kUsage, "unknown option " + k);
  }
  if (a.data.empty()) throw Error(ExitCode::kUsage, "needs --data FILE");
  return a;
}

// Seconds for one process to read /train/features whole, as stored.
double raw_read_s(const std::string& file, const SetInfo& info) {
  const auto t0 = Clock::now();
  h5::File f = h5::open_read(file, ExitCode::kData);
  h5::DataSet d = h5::open_dataset(f.get(), "/train/features", ExitCode::kData);
  const std::size_t row = info.feature_bytes_per_row();
  const std::uint64_t slab = std::max<std::uint64_t>(1, (std::size_t(64) << 20) / row);
  std::vector<unsigned char> buf(slab * row);
  const hid_t type = info.feature_type == FeatureType::kUint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  for (std::uint64_t b = 0; b < info.rows; b += slab)
    h5::read_rows(d.get(), type, b, std::min(slab, info.rows - b), buf.data(), ExitCode::kData);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ShuffleMode shuffle_of(const std::string& s) {
  return s == "none" ? ShuffleMode::kNone : s == "full" ? ShuffleMode::kFull : ShuffleMode::kBlock;
}

// Seconds of `epochs` epochs of the input path, the slowest rank's.
double pipeline_s(const MpiSession& mpi, const Args& a, const ReaderGroup& group, const SetInfo& info) {
  std::unique_ptr<Dataset> data;
  std::unique_ptr<InputQueue> queue;
  const BatchPlan plan(info.rows, a.batch);
  const std::uint64_t steps = plan.steps_per_epoch() * a.epochs;
  auto be = make_backend("cpu", BackendOptions{1});
  DPT_MPI_CHECK(MPI_Barrier(mpi.world()));
  const auto t0 = Clock::now();  // opening and the queue's first reads count
  if (group.reader()) {
    data = std::make_unique<Dataset>(a.data, "train");
    InputQueueConfig qc;
    qc.batch_size = a.batch;
    qc.shuffle.mode = shuffle_of(a.shuffle);
    qc.shuffle.seed = 1;
    qc.shuffle.block_rows = std::max<std::uint64_t>(1, info.chunk_rows ? info.chunk_rows : 1024);
    qc.end_step = steps;
    qc.capacity = a.prefetch;
    qc.cache_bytes = static_cast<std::size_t>(a.cache_mb) << 20;
    qc.raw_features = true;
    if (group.mode() != ReaderMode::kRank0) qc.group = group.shards();
    queue = std::make_unique<InputQueue>(*data, qc);
  }
  InputPipeline pipe(group.comm(), *be, queue.get(), max_shard_rows(a.batch, mpi.size()), info.dim,
                     info.label_width, info.label_type, info.feature_type, group.shards());
  pipe.start(plan.slot(0).rows);
  for (std::uint64_t s = 0; s < steps; ++s) {
    pipe.finish();
    if (s + 1 < steps) pipe.start(plan.slot(s + 1).rows);
  }
  double mine = std::chrono::duration<double>(Clock::now() - t0).count(), slowest = 0;
  DPT_MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, mpi.world()));
  return slowest;
}

int run(const MpiSession& mpi, const Args& a) {
  ReaderGroup group(mpi, parse_reader_mode(a.readers));
  SetInfo info;
  double raw_s = 0;
  if (mpi.rank() == 0) {
    info = Dataset(a.data, "train").info();
    // The first read also warms the page cache for both sides; best of the rest.
    raw_read_s(a.data, info);
    raw_s = raw_read_s(a.data, info);
    for (std::uint64_t r = 1; r < a.repeats; ++r) raw_s = std::min(raw_s, raw_read_s(a.data, info));
  }
  std::uint64_t shape[5] = {info.rows, info.dim, info.label_width, info.chunk_rows,
                            static_cast<std::uint64_t>(info.feature_type) * 2 +
                                static_cast<std::uint64_t>(info.label_type)};
  DPT_MPI_CHECK(MPI_Bcast(shape, 5, MPI_UINT64_T, 0, mpi.world()));
  info.rows = shape[0], info.dim = shape[1], info.label_width = shape[2], info.chunk_rows = shape[3];
  info.feature_type = static_cast<FeatureType>(shape[4] / 2);
  info.label_type = static_cast<LabelType>(shape[4] % 2);
  double s = pipeline_s(mpi, a, group, info);
  for (std::uint64_t r = 1; r < a.repeats; ++r) s = std::min(s, pipeline_s(mpi, a, group, info));
  if (mpi.rank() == 0) {
    const double samples = static_cast<double>(info.rows * a.epochs);
    const double row_bytes = static_cast<double>(info.feature_bytes_per_row() + info.label_bytes_per_row());
    nlohmann::json j = {{"readers", a.readers},       {"ranks", mpi.size()},
                        {"nodes", mpi.nodes()},       {"input_readers", group.readers()},
                        {"sample_bytes", info.feature_bytes_per_row()},
                        {"rows", info.rows},          {"batch", a.batch},
                        {"shuffle", a.shuffle},       {"cache_mb", a.cache_mb},
                        {"samples_per_s", samples / s},
                        {"bytes_per_s", samples * row_bytes / s},
                        {"raw_read_bytes_per_s", static_cast<double>(info.rows) *
                                                     static_cast<double>(info.feature_bytes_per_row()) / raw_s}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace dptrain

int main(int argc, char** argv) {
  dptrain::MpiSession mpi(argc, argv);
  try {
    return dptrain::run(mpi, dptrain::parse(argc, argv));
  } catch (const std::exception& e) {
    const auto* err = dynamic_cast<const dptrain::Error*>(&e);
    dptrain::report_error(err ? err->message() : e.what(), mpi.rank(), mpi.size());
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
