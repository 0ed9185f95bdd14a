// Implements: the cnn row of dptrain_bench (cnn_step_row.hpp): the demo
// CNN's training step (the model of jobs/fashion_mnist_cnn.ini on 128 rows
// of 1x28x28 unless --batch says otherwise, one rank) against the library
// calls inside it. The baseline is every conv and pooling pass of the step
// through the backend's own plans of the same geometry (cuDNN on CUDA,
// oneDNN on the CPU) and every GEMM of its dense layers (cuBLAS, or the CPU
// GEMM), back to back on buffers of the same shapes: what the step would
// cost with nothing of ours around the libraries (bn, activations,
// dropout, bias, loss, the optimizer and every launch between). ratio = baseline / step, the share
// of the step spent in the libraries. On a GPU a second row says whether
// what is left is launches or kernels: the host's time to queue the step's
// forward and backward against the device's time to run them, and a third
// the step with --cuda-graphs on (its forward, loss and backward replayed as
// a CUDA graph) against the same library passes.
#include "cnn_step_row.hpp"

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"
#include "dptrain/comm/communicator.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "train/step_graphs.hpp"
#include "train/train_step.hpp"

namespace dptrain::bench {
namespace {

constexpr char kSpec[] =
    "conv:32:3,bn,relu,maxpool:2,conv:64:3,bn,relu,maxpool:2,dense:128,relu,dropout:0.3,"
    "dense:10";
constexpr int kClasses = 10;

// The integer arguments of a canonical layer spec ("conv:32:3:1:1" -> 32, 3, 1, 1).
std::vector<int> spec_args(const Layer& layer) {
  std::vector<int> a;
  const std::string spec = layer.spec();
  for (std::size_t p = spec.find(':'); p != std::string::npos; p = spec.find(':', p + 1))
    a.push_back(std::stoi(spec.substr(p + 1)));
  return a;
}

SpatialExtent extent(const Shape& s) {  // {(D,) H, W} of [C, (D,) H, W]
  SpatialExtent e{};
  for (int d = 1; d < s.rank(); ++d) e[static_cast<std::size_t>(d - 1)] = s[d];
  return e;
}

// The library passes of one training step, each a closure over buffers of
// its own, forward ones in layer order and backward ones in reverse.
class LibraryPasses {
 public:
  LibraryPasses(Backend& be, int rows) : be_(be), rows_(rows), rng_(7) {}

  void add(const Layer& layer, bool first_with_params) {
    const std::string kind = layer.spec().substr(0, layer.spec().find(':'));
    if (kind == "conv") add_conv(layer, first_with_params);
    if (kind == "maxpool" || kind == "avgpool") add_pool(layer, kind);
    if (kind == "dense") add_dense(layer, first_with_params);
  }
  void run() const {
    for (const auto& f : forward_) f();
    for (auto it = backward_.rbegin(); it != backward_.rend(); ++it) (*it)();
  }
  std::size_t count() const { return passes_; }

 private:
  float* buffer(std::size_t n) {
    std::vector<float> host(n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : host) v = u(rng_);
    buffers_.emplace_back(be_, n);
    be_.copy_to_device(buffers_.back().get(), host.data(), n * sizeof(float));
    return buffers_.back().get();
  }

  void add_conv(const Layer& layer, bool first_with_params) {
    const int rows = rows_;
    const std::vector<int> a = spec_args(layer);
    const Shape &in = layer.input_shape(), &out = layer.output_shape();
    ConvGeometry g;
    g.dims = in.rank() - 1;
    g.in_channels = in[0];
    g.out_channels = out[0];
    g.input = extent(in);
    g.output = extent(out);
    for (int d = 0; d < g.dims; ++d) {
      g.kernel[std::size_t(d)] = a.at(1);
      g.stride[std::size_t(d)] = a.size() > 2 ? a[2] : 1;
      g.padding[std::size_t(d)] = a.size() > 3 ? a[3] : (a[1] - 1) / 2;
    }
    g.max_rows = rows;
    ConvPlan* plan = conv_plans_.emplace_back(be_.kernels<SpatialKernels>().conv_plan(g)).get();
    const std::size_t x_n = std::size_t(rows) * in.size(), y_n = std::size_t(rows) * out.size();
    std::size_t w_n = std::size_t(in[0]) * std::size_t(out[0]);
    for (int d = 0; d < g.dims; ++d) w_n *= std::size_t(g.kernel[std::size_t(d)]);
    float *x = buffer(x_n), *w = buffer(w_n), *b = buffer(out[0]), *y = buffer(y_n);
    float *dy = buffer(y_n), *dw = buffer(w_n), *db = buffer(out[0]), *dx = buffer(x_n);
    forward_.push_back([=] { plan->forward(x, w, b, y, rows); });
    backward_.push_back([=] {  // as a layer runs them: weights first, then data
      plan->backward_weights(x, dy, dw, db, rows);
      if (!first_with_params) plan->backward_data(dy, w, dx, rows);
    });
    passes_ += first_with_params ? 2 : 3;
  }

  void add_pool(const Layer& layer, const std::string& kind) {
    const int rows = rows_;
    const std::vector<int> a = spec_args(layer);
    const Shape &in = layer.input_shape(), &out = layer.output_shape();
    PoolGeometry g;
    g.kind = kind == "maxpool" ? PoolKind::kMax : PoolKind::kAvg;
    g.dims = in.rank() - 1;
    g.channels = in[0];
    g.input = extent(in);
    g.output = extent(out);
    for (int d = 0; d < g.dims; ++d) {
      g.window[std::size_t(d)] = a.at(0);
      g.stride[std::size_t(d)] = a.size() > 1 ? a[1] : a[0];
    }
    g.max_rows = rows;
    PoolPlan* plan = pool_plans_.emplace_back(be_.kernels<SpatialKernels>().pool_plan(g)).get();
    const std::size_t x_n = std::size_t(rows) * in.size(), y_n = std::size_t(rows) * out.size();
    float *x = buffer(x_n), *y = buffer(y_n), *dy = buffer(y_n), *dx = buffer(x_n);
    forward_.push_back([=] { plan->forward(x, y, rows); });
    // After the forward above, whose x and y cuDNN's backward rereads.
    backward_.push_back([=] { plan->backward(dy, dx, rows); });
    passes_ += 2;
  }

  // y = x W^T; dW = dy^T x; dx = dy W (not for the first layer), as Model runs them.
  void add_dense(const Layer& layer, bool first_with_params) {
    const int rows = rows_;
    const int in = static_cast<int>(layer.input_shape().size());
    const int out = static_cast<int>(layer.output_shape().size());
    float *x = buffer(std::size_t(rows) * in), *w = buffer(std::size_t(out) * in);
    float *y = buffer(std::size_t(rows) * out), *dy = buffer(std::size_t(rows) * out);
    float *dw = buffer(std::size_t(out) * in), *dx = buffer(std::size_t(rows) * in);
    Backend& be = be_;
    forward_.push_back(
        [=, &be] { be.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out); });
    backward_.push_back([=, &be] {
      be.gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 0.0f, dw, in);
      if (!first_with_params)
        be.gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
    });
    passes_ += first_with_params ? 2 : 3;
  }

  Backend& be_;
  int rows_;
  std::mt19937 rng_;
  std::vector<DeviceBuffer<float>> buffers_;
  std::vector<std::unique_ptr<ConvPlan>> conv_plans_;
  std::vector<std::unique_ptr<PoolPlan>> pool_plans_;
  std::vector<std::function<void()>> forward_, backward_;
  std::size_t passes_ = 0;
};

// Forward and backward of `step` (given a timer): the host's time to queue
// them (the timer's host laps) against the device's time from the first
// marker to the end of backward (its markers), medians over `repeats`
// steps, each from an idle device. The device runs each launch as it comes:
// where it is faster than the host queues, it waits for every launch and
// its time is about the host's (ratio near 1: launches bound the step,
// which fewer kernels or a CUDA graph would cut); where it is slower, the
// host is done first (ratio well under 1: the kernels' own time does).
Row queue_row(Backend& be, const std::function<void(PhaseTimer*)>& step, int repeats,
              const std::string& where) {
  PhaseTimer timer;
  timer.attach_device(&be);
  Samples s;
  const auto both = [&] { return timer.ms(Phase::kForward) + timer.ms(Phase::kBackward); };
  for (s.repeats = 0; s.repeats < repeats; ++s.repeats) {
    be.synchronize();
    timer.reset();
    timer.start();
    step(&timer);
    s.base.push_back(both());  // host laps until end_step puts the device's in their place
    be.synchronize();
    timer.end_step();
    s.ours.push_back(both());
  }
  return make_row("CNN forward+backward: host queue time vs device time (" + where + ")", s,
                  base_over_ours, "",
                  "ours = the device's time for the step's forward and backward (markers), "
                  "baseline = the host's time to queue them, each step from an idle device; "
                  "ratio = baseline / ours: near 1, the device waits for launches; well under "
                  "1, for its kernels");
}

}  // namespace

std::vector<Row> cnn_step_rows(Backend& be, const RowRun& run, const std::string& where,
                               bool gpu) {
  const int rows = run.rows;
  auto comm = make_mpi_communicator(MPI_COMM_SELF);
  const Shape input{1, 28, 28};
  Model model(be, parse_model_spec(kSpec), input, rows);
  model.init(1);
  model.set_step({1, 0, 0, 0, nullptr});
  Optimizer opt(be, OptimizerConfig{}, model.num_params());  // Adam
  DeviceBuffer<float> stats(be, 2);
  ShardBuffers shard(be, rows, static_cast<int>(input.size()), 1, LabelType::kClass);
  Shard& host = shard.host();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  host.rows = rows;
  for (std::size_t i = 0; i < std::size_t(rows) * input.size(); ++i) host.features[i] = u(rng);
  for (int r = 0; r < rows; ++r) host.labels[r] = static_cast<std::int32_t>(rng() % kClasses);
  const Shard& dev = shard.to_device();

  LibraryPasses library(be, rows);
  bool first = true;
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    library.add(model.layer(i), first);
    if (!model.layer(i).params().empty()) first = false;
  }
  // Both sides end with the device idle (train_step reads a count back).
  const Side ours{nullptr, [&] {
                    const auto t0 = Clock::now();
                    train_step(be, *comm, model, opt, LossKind::kXent, dev, rows, 1e-3f,
                               stats.get(), nullptr);
                    be.synchronize();
                    return ms_since(t0);
                  }};
  const Side base{nullptr, [&] {
                    const auto t0 = Clock::now();
                    library.run();
                    be.synchronize();
                    return ms_since(t0);
                  }};
  const Samples s = alternate(MPI_COMM_SELF, run.repeats,
                              with_warmup({10, 3.0, 10, 2000}, run.warmup), ours, base);
  std::vector<Row> out{make_row(
      "CNN step vs its library passes (" + where + ")", s, base_over_ours, gpu ? ">= 0.85" : "",
      "ours = train_step (forward, xent, backward, Adam) of " + std::string(kSpec) + " on " +
          std::to_string(rows) + " rows of 1x28x28; baseline = its " +
          std::to_string(library.count()) + " conv, pooling and GEMM passes" +
          " through the backend's plans and GEMM (" + be.gemm_library() +
          "), same shapes, back to back; ratio = baseline / ours: the share of "
          "the step in the libraries")};
  const auto step = [&](PhaseTimer* timer) {
    train_step(be, *comm, model, opt, LossKind::kXent, dev, rows, 1e-3f, stats.get(), timer);
  };
  if (!gpu) return out;
  out.push_back(queue_row(be, step, s.repeats, where));
  // The same step with --cuda-graphs: forward, loss and backward one launch.
  StepGraphs graphs(be);
  const Side graphed{nullptr, [&] {
                       const auto t0 = Clock::now();
                       train_step(be, *comm, model, opt, LossKind::kXent, dev, rows, 1e-3f,
                                  stats.get(), nullptr, nullptr, nullptr, nullptr, &graphs);
                       be.synchronize();
                       return ms_since(t0);
                     }};
  const Samples g = alternate(MPI_COMM_SELF, run.repeats,
                              with_warmup({10, 3.0, 10, 2000}, run.warmup), graphed, base);
  std::string how = graphs.replays() ? "replayed as a CUDA graph"
                                     : "NOT recorded (" + graphs.take_failure() + "): as usual";
  out.push_back(make_row(
      "CNN step vs its library passes, --cuda-graphs on (" + where + ")", g, base_over_ours,
      ">= 0.85",
      "ours = the train_step above with its forward, xent and backward " + how +
          "; baseline and ratio as above"));
  return out;
}

}  // namespace dptrain::bench
