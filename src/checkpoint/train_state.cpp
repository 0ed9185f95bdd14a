// Implements: restore_state, save_state, check_towers (see train_state.hpp).
#include "dptrain/checkpoint/train_state.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "dptrain/common/error.hpp"
#include "dptrain/parallel/state_slices.hpp"

namespace dptrain {
namespace {

// What rank 0 found, broadcast to every rank as one message.
struct RestoreHeader {
  std::int64_t resumed = 0;         // 1: training state restored, not only weights
  std::int64_t step = 0;            // the checkpoint's step
  std::int64_t optimizer_step = 0;  // the optimizer's step count
  std::int64_t have_weights = 0;    // 1: weights (and buffers) to broadcast
};

// The devices' pointers to the optimizer's state arrays (its slices when sliced).
std::vector<float*> state_arrays(Optimizer& opt) {
  std::vector<float*> out;
  for (const auto& s : opt.state()) out.push_back(s.data);
  return out;
}

// A checkpoint read for resuming must be this run's: model, loss, batch
// boundary, optimizer and its state arrays.
void check_resumable(const CheckpointData& ck, const std::string& path, const Options& opts,
                     const Model& model, Optimizer& opt, LossKind loss, const BatchPlan& plan) {
  DPT_REQUIRE(ck.has_training_state, ExitCode::kCheckpoint,
              path + ": holds only /model; use --init-from to start from its weights");
  DPT_REQUIRE(ck.meta.model == model.spec() && ck.meta.loss == loss_name(loss),
              ExitCode::kCheckpoint,
              path + ": written for --model " + ck.meta.model + " --loss " + ck.meta.loss +
                  ", this run has --model " + model.spec() + " --loss " + loss_name(loss));
  const BatchSlot slot = plan.slot(static_cast<std::uint64_t>(ck.meta.step));
  DPT_REQUIRE(slot.epoch == static_cast<std::uint64_t>(ck.meta.epoch) &&
                  slot.position == static_cast<std::uint64_t>(ck.meta.epoch_position),
              ExitCode::kCheckpoint,
              path + ": its cursor (epoch " + std::to_string(ck.meta.epoch) + ", sample " +
                  std::to_string(ck.meta.epoch_position) +
                  ") is not a batch boundary of this run; resume with the same --batch-size "
                  "and data");
  const auto state = opt.state();
  DPT_REQUIRE(ck.meta.optimizer == opts.optimizer && ck.optimizer_state.size() == state.size(),
              ExitCode::kCheckpoint,
              path + ": optimizer state is for '" + ck.meta.optimizer + "', this run uses '" +
                  opts.optimizer + "'");
  // Each array's tensors were checked against the /model layout, which
  // check_layout held against the model's: only the names are left.
  for (std::size_t i = 0; i < state.size(); ++i)
    DPT_REQUIRE(ck.optimizer_state[i].name == state[i].name, ExitCode::kCheckpoint,
                path + ": optimizer state '" + state[i].name + "' missing");
}

// Array `array` of the file, whole, into dst (device), through one host
// copy of the arena: what a rank that keeps the whole array needs anyway.
void read_array(CheckpointTensors& tensors, std::size_t array, const std::vector<ParamInfo>& layout,
                Backend& be, float* dst) {
  std::vector<float> host(arena_size(layout));
  for (const ParamInfo& p : layout) tensors.read(array, p, host.data() + p.offset);
  be.copy_to_device(dst, host.data(), host.size() * sizeof(float));
}

// The checkpoint to resume from: --resume FILE, or with --resume auto the
// newest valid one of --checkpoint-dir; "" for none (--resume never).
std::string checkpoint_to_resume(const Options& opts) {
  if (opts.resume == "never") return "";
  if (opts.resume != "auto") return opts.resume;
  if (opts.checkpoint_dir.empty() || !std::filesystem::is_directory(opts.checkpoint_dir)) return "";
  return find_resume_checkpoint(opts.checkpoint_dir);
}

}  // namespace

StartPoint restore_state(const Options& opts, const MpiSession& mpi, Runtime& rt, Model& model,
                         Optimizer& opt, LossKind loss, const BatchPlan& plan,
                         const std::vector<std::size_t>& state_slices) {
  Backend& be = *rt.backend;
  StartPoint sp;
  RestoreHeader header;
  // Sliced (--shard-optimizer, --shard-params): rank 0 keeps the file open
  // and reads what lives in slices tensor by tensor as it sends each rank its
  // part, so it never holds a whole array. A file of either kind resumes
  // either way.
  const bool sliced = !state_slices.empty();
  const bool sliced_params = model.param_slice() != nullptr;
  std::unique_ptr<CheckpointTensors> tensors;
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    std::string path = checkpoint_to_resume(opts);
    const bool resuming = !path.empty();
    if (!resuming) path = opts.init_from;
    if (path.empty()) return;
    // A /model-only file (PyTorch via h5py) is read in this model's layout.
    const ModelLayout expect{model.param_layout(), model.buffer_layout(), model.output_shape()};
    OpenedCheckpoint opened = open_checkpoint(path, !resuming, &expect);
    const CheckpointData& ck = opened.data;
    check_layout(ck, model.param_layout(), model.buffer_layout(), path);
    if (resuming) {
      check_resumable(ck, path, opts, model, opt, loss, plan);
      if (!sliced)
        for (std::size_t i = 0; i < opt.state().size(); ++i)
          read_array(*opened.tensors, 1 + i, model.param_layout(), be, opt.state()[i].data);
      header.resumed = 1;
      header.step = ck.meta.step;
      header.optimizer_step = ck.meta.optimizer_step;
    }
    if (!sliced_params) read_array(*opened.tensors, 0, model.param_layout(), be, model.params());
    if (!ck.buffers.empty())
      be.copy_to_device(model.buffers(), ck.buffers.data(), ck.buffers.size() * sizeof(float));
    header.have_weights = 1;
    sp.from = path;
    if (sliced) tensors = std::move(opened.tensors);
    std::printf("dptrain: %s %s (step %lld)\n", resuming ? "resuming from" : "initialising from",
                path.c_str(), static_cast<long long>(ck.meta.step));
    std::fflush(stdout);
  });
  static_assert(sizeof(RestoreHeader) == 4 * sizeof(std::int64_t));
  DPT_MPI_CHECK(MPI_Bcast(&header, 4, MPI_INT64_T, 0, mpi.world()));
  if (header.have_weights) {
    if (!sliced_params) rt.comm->broadcast(model.params(), model.num_params() * sizeof(float), 0);
    if (model.num_buffers())
      rt.comm->broadcast(model.buffers(), model.num_buffers() * sizeof(float), 0);
  }
  if (header.resumed && !sliced)
    for (auto& s : opt.state()) rt.comm->broadcast(s.data, opt.size() * sizeof(float), 0);
  // What lives in slices, each array with its index among the file's arrays.
  std::vector<float*> slices;
  std::vector<std::size_t> file_array;
  if (header.have_weights && sliced_params) {
    slices.push_back(model.param_slice());
    file_array.push_back(0);
  }
  for (std::size_t i = 0; header.resumed && sliced && i < opt.state().size(); ++i) {
    slices.push_back(opt.state()[i].data);
    file_array.push_back(1 + i);
  }
  if (!slices.empty())
    agree(mpi.world(), [&] {
      scatter_state_slices(mpi.world(), be, model.param_layout(), state_slices, slices,
                           [&](std::size_t s, const ParamInfo& p, float* out) {
                             tensors->read(file_array[s], p, out);
                           });
    });
  if (header.resumed) {
    opt.set_step_count(header.optimizer_step);
    sp.resumed = true;
    sp.step = static_cast<std::uint64_t>(header.step);
  }
  return sp;
}

namespace {

void write_state(const std::string& path, bool in_checkpoint_dir, const Options& opts,
                 const MpiSession& mpi, Backend& be, Model& model, Optimizer& opt, LossKind loss,
                 const BatchPlan& plan, std::uint64_t step, StateSliceGather* gather) {
  // Refuse to persist a broken state: a resumed run must never start from it.
  const std::string broken = "refusing to write checkpoint " + path +
                             ": parameters hold NaN/Inf at step " + std::to_string(step);
  const bool sliced_params = model.param_slice() != nullptr;
  DPT_REQUIRE(sliced_params ||
                  be.count_nonfinite(std::as_const(model).params(), model.num_params()) == 0,
              ExitCode::kNumeric, broken);
  CheckpointData ck;
  const BatchSlot slot = plan.slot(step);
  ck.meta.model = model.spec();
  ck.meta.loss = loss_name(loss);
  ck.meta.step = static_cast<std::int64_t>(step);
  ck.meta.epoch = static_cast<std::int64_t>(slot.epoch);
  ck.meta.epoch_position = static_cast<std::int64_t>(slot.position);
  ck.meta.seed = opts.seed;
  ck.meta.world_size = mpi.size();
  ck.meta.config = opts.config_text;
  ck.meta.optimizer = optimizer_name(opt.config().kind);
  ck.meta.optimizer_step = opt.step_count();
  for (int i = 0; i < model.input_shape().rank(); ++i)
    ck.input_shape.push_back(static_cast<std::size_t>(model.input_shape()[i]));
  ck.vocab_size = model.vocab();
  ck.param_layout = model.param_layout();
  if (sliced_params) {
    // Gathered array 0 of the slices (save_state), tensor by tensor.
    ck.params_fetch = [gather, broken](const ParamInfo& p, float* out) {
      gather->fetch(0, p, out);
      for (std::size_t i = 0; i < p.count; ++i)
        DPT_REQUIRE(std::isfinite(out[i]), ExitCode::kNumeric, broken);
    };
  } else {
    ck.params.resize(model.num_params());
    be.copy_to_host(ck.params.data(), std::as_const(model).params(),
                    ck.params.size() * sizeof(float));
  }
  ck.buffer_layout = model.buffer_layout();
  ck.buffers.resize(model.num_buffers());
  if (!ck.buffers.empty())
    be.copy_to_host(ck.buffers.data(), model.buffers(), ck.buffers.size() * sizeof(float));
  const std::vector<Optimizer::State> states = opt.state();
  for (std::size_t i = 0; i < states.size(); ++i) {
    CheckpointData::State st{states[i].name, {}, {}};
    if (gather) {
      const std::size_t s = i + (sliced_params ? 1 : 0);  // the parameters come first
      st.fetch = [gather, s](const ParamInfo& p, float* out) { gather->fetch(s, p, out); };
    } else {
      st.values.resize(opt.size());
      be.copy_to_host(st.values.data(), states[i].data, opt.size() * sizeof(float));
    }
    ck.optimizer_state.push_back(std::move(st));
  }
  ck.has_training_state = true;
  if (in_checkpoint_dir) std::filesystem::create_directories(opts.checkpoint_dir);
  write_checkpoint(path, ck);
  if (in_checkpoint_dir) prune_checkpoints(opts.checkpoint_dir, static_cast<int>(opts.keep_checkpoints));
  std::printf("checkpoint: step %llu -> %s\n", static_cast<unsigned long long>(step), path.c_str());
  std::fflush(stdout);
}

}  // namespace

void save_state(const std::string& path, bool in_checkpoint_dir, const Options& opts,
                const MpiSession& mpi, Runtime& rt, Model& model, Optimizer& opt, LossKind loss,
                const BatchPlan& plan, std::uint64_t step,
                const std::vector<std::size_t>& state_slices) {
  Backend& be = *rt.backend;
  // Sliced: rank 0 gathers the state tensor by tensor as it writes them.
  std::optional<StateSliceGather> gather;
  if (!state_slices.empty()) {
    std::vector<float*> arrays = state_arrays(opt);
    if (model.param_slice()) arrays.insert(arrays.begin(), model.param_slice());
    gather.emplace(mpi.world(), be, model.param_layout(), state_slices, std::move(arrays));
  }
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) {
      if (gather) gather->serve();
      return;
    }
    try {
      write_state(path, in_checkpoint_dir, opts, mpi, be, model, opt, loss, plan, step,
                  gather ? &*gather : nullptr);
    } catch (...) {
      if (gather) gather->drain();  // the owners are sending: take it all
      throw;
    }
  });
}

void check_towers(const MpiSession& mpi, Backend& be, Model& model, std::uint64_t step) {
  std::vector<float> p(model.num_params());
  be.copy_to_host(p.data(), std::as_const(model).params(), p.size() * sizeof(float));
  // Identical bits give an identical sum; any drift changes it (almost surely).
  double sum = 0, weighted = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    sum += p[i];
    weighted += p[i] * static_cast<double>((i % 1021) + 1);
  }
  double mine[2] = {sum + weighted, -(sum + weighted)};
  double red[2] = {0, 0};
  DPT_MPI_CHECK(MPI_Allreduce(mine, red, 2, MPI_DOUBLE, MPI_MIN, mpi.world()));
  if (red[0] == -red[1]) return;
  std::vector<double> all(static_cast<std::size_t>(mpi.size()));
  DPT_MPI_CHECK(MPI_Gather(&mine[0], 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, mpi.world()));
  if (mpi.rank() == 0) {
    std::string ranks;
    for (int r = 1; r < mpi.size(); ++r)
      if (all[static_cast<std::size_t>(r)] != all[0]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    report_error("tower consistency check failed at step " + std::to_string(step) +
                     ": parameters of rank(s) " + ranks + " differ from rank 0",
                 0, 1);
  }
  throw AgreedFailure(ExitCode::kNumeric);
}

}  // namespace dptrain
