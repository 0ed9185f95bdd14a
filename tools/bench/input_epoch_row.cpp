// Implements: the input row of dptrain_bench (input_epoch_row.hpp).
#include "input_epoch_row.hpp"

#include <cstdio>
#include <memory>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/scatter.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/run/agree.hpp"

namespace dptrain::bench {

Row input_epoch_row(const MpiSession& mpi, const std::string& data_file, int threads,
                    const RowRun& run) {
  const std::string name = "input pipeline epoch vs raw HDF5 read, " + plural(mpi.size(), "rank");
  constexpr std::uint64_t kBatch = 128;
  struct Shape {
    std::uint64_t rows, dim, label_width, feature_bytes;
    std::int32_t class_labels, feature_type;
  } shape{};
  agree(mpi.world(), [&] {  // checks the file once, untimed
    if (mpi.rank() != 0) return;
    Dataset d(data_file, "train");
    const SetInfo& i = d.info();
    shape = {i.rows, i.dim, i.label_width, i.rows * i.feature_bytes_per_row(),
             i.label_type == LabelType::kClass, static_cast<std::int32_t>(i.feature_type)};
  });
  DPT_MPI_CHECK(MPI_Bcast(&shape, sizeof shape, MPI_BYTE, 0, mpi.world()));
  const LossKind loss = shape.class_labels ? LossKind::kXent : LossKind::kMse;

  auto be = make_backend("cpu", BackendOptions{threads});
  // As the trainer does: features travel as stored, converted per rank.
  const auto wire = static_cast<FeatureType>(shape.feature_type);
  const bool raw = wire != FeatureType::kFloat32;
  ShardBuffers shard(*be, max_shard_rows(kBatch, mpi.size()), shape.dim, shape.label_width,
                     label_type(loss), 0, wire);
  const DupComm scatter_comm(mpi.world());
  Scatter scatter(scatter_comm.get(), shape.dim, shape.label_width, shape.class_labels != 0, wire);
  const BatchPlan plan(shape.rows, kBatch);
  bool cached = false;

  // Rank 0 opens the set and reads it through the queue (filling its cache);
  // every rank receives its shard of every batch of the epoch.
  const Side ours{nullptr, [&] {
                    const auto t0 = Clock::now();
                    std::unique_ptr<Dataset> data;
                    std::unique_ptr<InputQueue> queue;
                    if (mpi.rank() == 0) {
                      data = std::make_unique<Dataset>(data_file, "train");
                      InputQueueConfig qc;
                      qc.batch_size = kBatch;
                      qc.shuffle.mode = ShuffleMode::kFull;
                      qc.end_step = plan.steps_per_epoch();
                      qc.raw_features = raw;
                      queue = std::make_unique<InputQueue>(*data, qc);
                      cached = queue->cached();
                    }
                    for (std::uint64_t step = 0; step < plan.steps_per_epoch(); ++step)
                      next_shard(queue.get(), scatter, plan.slot(step).rows, shard);
                    queue.reset();
                    return ms_since(t0);
                  }};
  // Rank 0 reads both datasets whole, in their stored types; the others wait.
  const Side base{nullptr, [&] {
                    double ms = 0.0;
                    if (mpi.rank() == 0) {
                      const auto t0 = Clock::now();
                      h5::File file = h5::open_read(data_file, ExitCode::kData);
                      for (const char* path : {"train/features", "train/labels"}) {
                        h5::DataSet d = h5::open_dataset(file.get(), path, ExitCode::kData);
                        h5::DataType stored = h5::type_of(d.get());
                        h5::DataType native(H5Tget_native_type(stored.get(), H5T_DIR_ASCEND));
                        std::size_t bytes = H5Tget_size(native.get());
                        for (hsize_t extent : h5::shape(d.get())) bytes *= extent;
                        std::unique_ptr<unsigned char[]> buf(new unsigned char[bytes]);
                        h5::read_all(d.get(), native.get(), buf.get(), ExitCode::kData);
                      }
                      ms = ms_since(t0);
                    }
                    idle_barrier(mpi.world());
                    return ms;
                  }};
  // The warm-up pair reads the file once on each side: both then read from
  // the page cache.
  const Samples s = alternate(mpi.world(), run.repeats,
                              with_warmup({1, 4.0, 3, 50}, run.warmup), ours, base);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.3g MiB", double(shape.feature_bytes) / 1048576.0);
  return make_row(name, s, base_over_ours, ">= 0.8",
                  "ratio = raw read ms / pipeline ms, i.e. pipeline throughput as a fraction of a "
                  "raw read (>= 0.8: at least 0.8x); ours = rank 0 opens the Dataset, InputQueue "
                  "(batch 128, full shuffle, " + std::string(cached ? "set cached" : "streaming") +
                      ") reads and shuffles, blocking Scatter to every rank (uint8 sent as bytes, each rank converts its shard), " +
                      std::to_string(plan.steps_per_epoch()) + " batches of " +
                      std::to_string(shape.rows) + " rows, max over ranks (validate excluded); "
                      "baseline = rank 0 H5Dread of /train/features (" + mib +
                      ") and /train/labels in stored types; page cache warm");
}

}  // namespace dptrain::bench
