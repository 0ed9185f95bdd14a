// Implements: the eval and predict commands — a checkpoint's model on every
// rank (rank 0 reads, broadcasts), the set sharded like training, and for
// predict the outputs gathered to rank 0 and written to /predictions.
#include <algorithm>
#include <cstdio>

#include "app/commands.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/data/shared_set.hpp"
#include "dptrain/run/control_plane.hpp"
#include "dptrain/run/runtime.hpp"
#include "dptrain/run/watchdog.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "dptrain/train/evaluate.hpp"

namespace dptrain {
namespace {

// eval and predict read the set once, in order: hold it in memory when it
// fits this much (the training default of --input-cache-mb).
constexpr std::size_t kEvalCacheBytes = std::size_t(1) << 30;

// A checkpoint's model on every rank, with rank 0's weights.
struct LoadedModel {
  std::unique_ptr<Model> model;
  LossKind loss = LossKind::kXent;
  std::int64_t step = 0;
};

LoadedModel load_model(const Options& opts, const MpiSession& mpi, Runtime& rt, SharedSet* set_out,
                       const std::string& set_name, std::uint64_t batch) {
  CheckpointData ck;
  std::string spec, loss;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    ck = read_checkpoint(opts.checkpoint, true);
    spec = ck.meta.model;
    loss = ck.meta.loss;
    DPT_REQUIRE(!spec.empty() && !loss.empty(), ExitCode::kCheckpoint,
                opts.checkpoint + ": no model spec or loss attribute; " +
                    "eval and predict need a checkpoint written by dptrain train");
  });
  broadcast_string(mpi.world(), spec);
  broadcast_string(mpi.world(), loss);
  LoadedModel lm;
  std::vector<LayerSpec> layers;
  agree(mpi.world(), [&] {
    layers = parse_model_spec(spec);
    lm.loss = parse_loss(loss);
  });
  *set_out = open_set(mpi, opts.data, set_name, label_type(lm.loss), spec_output_width(layers));
  check_model_fits(mpi, layers, set_out->info, class_labels(lm.loss));
  agree(mpi.world(), [&] {
    lm.model = std::make_unique<Model>(*rt.backend, layers, sample_shape(set_out->info),
                                       max_shard_rows(batch, mpi.size()),
                                       model_vocab(set_out->info));
    if (mpi.rank() == 0) {
      check_layout(ck, lm.model->param_layout(), lm.model->buffer_layout(), opts.checkpoint);
      rt.backend->copy_to_device(lm.model->params(), ck.params.data(),
                                 ck.params.size() * sizeof(float));
      if (!ck.buffers.empty())
        rt.backend->copy_to_device(lm.model->buffers(), ck.buffers.data(),
                                   ck.buffers.size() * sizeof(float));
      lm.step = ck.meta.step;
    }
  });
  rt.comm->broadcast(lm.model->params(), lm.model->num_params() * sizeof(float), 0);
  if (lm.model->num_buffers())
    rt.comm->broadcast(lm.model->buffers(), lm.model->num_buffers() * sizeof(float), 0);
  return lm;
}

}  // namespace

ExitCode run_eval(const Options& opts, MpiSession& mpi) {
  Watchdog watchdog(opts.comm_timeout, mpi.rank(), mpi.size());
  Runtime rt = make_runtime(opts, mpi, &watchdog);
  Watchdog::Watching watching(&watchdog, rt.comm.get());
  const auto batch = static_cast<std::uint64_t>(opts.eval_batch_size);
  SharedSet set;
  LoadedModel lm = load_model(opts, mpi, rt, &set, opts.set, batch);
  const EvalResult r = evaluate(mpi, *rt.backend, *rt.comm, set, *lm.model, lm.loss, batch, kEvalCacheBytes);
  if (mpi.rank() == 0) {
    if (lm.loss == LossKind::kXent)
      std::printf("%s /%s: %llu samples, loss %.6f, accuracy %.6f\n", opts.data.c_str(),
                  opts.set.c_str(), static_cast<unsigned long long>(r.samples), r.loss, r.accuracy);
    else
      std::printf("%s /%s: %llu samples, loss %.6f\n", opts.data.c_str(), opts.set.c_str(),
                  static_cast<unsigned long long>(r.samples), r.loss);
    if (!opts.metrics.empty()) {
      MetricsWriter m;
      m.open(opts.metrics);
      nlohmann::json e = {{"event", "eval"}, {"step", lm.step}, {"set", opts.set}, {"loss", r.loss},
                          {"samples", r.samples}};
      if (lm.loss == LossKind::kXent) e["accuracy"] = r.accuracy;
      m.write(e);
    }
  }
  return ExitCode::kOk;
}

namespace {

// predict's output file, on rank 0: written as NAME.tmp and renamed at
// the end, so a failed run leaves no half-written file under the final name.
struct PredictionFile {
  std::string path, tmp;
  h5::File out;
  h5::DataSet logits, labels;

  // /predictions/logits (float32 logits_dims, where wanted) and
  // /predictions/labels (int32 label_dims), chunked by rows.
  void create(const std::string& output, const std::vector<hsize_t>& logits_dims,
              const std::vector<hsize_t>& label_dims, bool with_logits) {
    path = output;
    tmp = output + ".tmp";
    out = h5::create_file(tmp, ExitCode::kUsage);
    const hsize_t n = label_dims[0], positions = label_dims.size() == 2 ? label_dims[1] : 1;
    const hsize_t per_row = logits_dims[1] * (logits_dims.size() == 3 ? logits_dims[2] : 1);
    h5::CreateOptions co;
    co.chunk_rows = std::max<hsize_t>(1, std::min<hsize_t>(n, (1u << 20) / (4u * per_row)));
    if (with_logits)
      logits = h5::create_dataset(out.get(), "/predictions/logits", H5T_IEEE_F32LE, logits_dims,
                                  ExitCode::kUsage, co);
    co.chunk_rows = std::max<hsize_t>(1, std::min<hsize_t>(n, (1u << 18) / positions));
    labels = h5::create_dataset(out.get(), "/predictions/labels", H5T_STD_I32LE, label_dims,
                                ExitCode::kUsage, co);
  }
  // The checkpoint and set as attributes, the file closed and renamed.
  void finish(const std::string& checkpoint, const std::string& set) {
    h5::write_attr(out.get(), "checkpoint", checkpoint, ExitCode::kOther);
    h5::write_attr(out.get(), "set", set, ExitCode::kOther);
    logits.reset();
    labels.reset();
    out.reset();
    DPT_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, ExitCode::kOther,
                "cannot rename " + tmp + " to " + path);
  }
};

}  // namespace

ExitCode run_predict(const Options& opts, MpiSession& mpi) {
  Watchdog watchdog(opts.comm_timeout, mpi.rank(), mpi.size());
  Runtime rt = make_runtime(opts, mpi, &watchdog);
  Watchdog::Watching watching(&watchdog, rt.comm.get());
  Backend& be = *rt.backend;
  const auto batch = static_cast<std::uint64_t>(opts.eval_batch_size);
  SharedSet set;
  LoadedModel lm = load_model(opts, mpi, rt, &set, opts.set, batch);
  const int width = lm.model->output_dim();
  // A sequence output [T, C] (a language model): the argmax per position,
  // and the N·T·C logits only when asked for.
  const int positions = lm.model->output_positions(), classes = lm.model->output_classes();
  const bool sequence = lm.model->output_shape().rank() == 2;
  const bool write_logits = !sequence || opts.predict_logits;
  const std::uint64_t n = set.info.rows;
  const std::vector<hsize_t> logits_dims =
      sequence ? std::vector<hsize_t>{n, hsize_t(positions), hsize_t(classes)}
               : std::vector<hsize_t>{n, hsize_t(width)};
  const std::vector<hsize_t> label_dims =
      sequence ? std::vector<hsize_t>{n, hsize_t(positions)} : std::vector<hsize_t>{n};

  PredictionFile file;
  agree(mpi.world(), [&] {
    if (mpi.rank() == 0) file.create(opts.output, logits_dims, label_dims, write_logits);
  });

  // Each batch's outputs are gathered to rank 0 in rank order, which is
  // sample order (shards are consecutive rows), and written there.
  std::vector<float> local(static_cast<std::size_t>(max_shard_rows(batch, mpi.size())) * width);
  std::vector<float> global(mpi.rank() == 0 ? batch * width : 0);
  std::vector<std::int32_t> labels(mpi.rank() == 0 ? batch * positions : 0);
  forward_pass(mpi, be, set, *lm.model, lm.loss, batch, kEvalCacheBytes,
               [&](const BatchSlot& slot, const Shard& shard, const float* o) {
    if (shard.rows > 0)
      be.copy_to_host(local.data(), o, static_cast<std::size_t>(shard.rows) * width * sizeof(float));
    std::vector<int> counts = shard_counts(slot.rows, mpi.size());
    for (int& c : counts) c *= width;
    const std::vector<int> displs = shard_offsets(counts);
    DPT_MPI_CHECK(MPI_Gatherv(local.data(), shard.rows * width, MPI_FLOAT, global.data(),
                              counts.data(), displs.data(), MPI_FLOAT, 0, mpi.world()));
    if (mpi.rank() != 0) return;
    for (std::uint64_t r = 0; r < slot.rows * positions; ++r) {
      const float* row = global.data() + r * classes;
      labels[r] = static_cast<std::int32_t>(std::max_element(row, row + classes) - row);
    }
    if (write_logits)
      h5::write_rows(file.logits.get(), H5T_NATIVE_FLOAT, slot.position, slot.rows, global.data(),
                     ExitCode::kOther);
    h5::write_rows(file.labels.get(), H5T_NATIVE_INT32, slot.position, slot.rows, labels.data(),
                   ExitCode::kOther);
  });
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    file.finish(opts.checkpoint, opts.set);
    if (sequence)
      std::printf("wrote %llu predictions (the argmax of %d outputs at each of %d positions%s) to %s\n",
                  static_cast<unsigned long long>(n), classes, positions,
                  write_logits ? ", and the logits" : "", opts.output.c_str());
    else
      std::printf("wrote %llu predictions (%d outputs each) to %s\n",
                  static_cast<unsigned long long>(n), width, opts.output.c_str());
  });
  return ExitCode::kOk;
}

}  // namespace dptrain
