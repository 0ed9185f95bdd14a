// "No allocation in the step": once warmed up, the training step (pipelined
// scatter, forward, loss, backward with bucketed all-reduces, optimizer) and
// the input pipeline make no heap allocation of their own on the training
// thread, and create no oneDNN primitive: for an MLP, and for a GPT on a
// token set (whose batched GEMMs run oneDNN primitives; oneDNN's own
// allocations inside a primitive's execution are counted apart). Counted by replacing the global
// operator new and malloc for this test binary; only the calling thread's
// allocations count (rank 0's reader thread may allocate).
//
// One exception is measured, not hidden: oneDNN's sgemm takes a packing
// buffer from malloc on some shapes (N/N and N/T), once per call, and
// returns it; glibc serves it from its free lists, without a system call.
// Its size is the kernel's blocking, so it depends on the CPU (about 16 KiB
// with AVX2, 72 KiB with AVX-512). So malloc may be called at most once per
// GEMM of the step, never for more than the GEMM library itself takes for
// the step's shapes, called bare (on more ranks, where Open MPI's
// non-blocking collectives malloc their schedules too, 64 KiB if that is
// more); creating a primitive or a tensor would break either.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_gemm.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/optimizer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"
#include "parallel/gradient_buckets.hpp"
#include "train/train_step.hpp"

namespace {
thread_local bool counting = false;
thread_local long allocations = 0;  // operator new
thread_local long mallocs = 0;      // malloc and its aligned forms (operator new included)
thread_local std::size_t largest_malloc = 0;

void count_malloc(std::size_t n) {
  if (!counting) return;
  ++mallocs;
  largest_malloc = std::max(largest_malloc, n);
}
}  // namespace

// glibc's allocator under its internal names: interposing these keeps every
// pointer from one allocator, whoever frees it.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  count_malloc(n);
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  count_malloc(n * size);
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  count_malloc(n);
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
int posix_memalign(void** p, std::size_t alignment, std::size_t n) {
  count_malloc(n);
  *p = __libc_memalign(alignment, n);
  return *p ? 0 : ENOMEM;
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
  count_malloc(n);
  return __libc_memalign(alignment, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
  count_malloc(n);
  return __libc_memalign(alignment, n);
}
}

// Whether the code that called operator new is inside oneDNN: its
// dnnl_primitive_execute builds a small argument map per call (a GPT step's
// batched GEMMs are primitives); those allocations are the library's, counted
// apart, and must stay a few per call.
bool called_from_onednn(void* caller) {
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fname &&
         std::strstr(info.dli_fname, "libdnnl") != nullptr;
}
thread_local long onednn_allocations = 0;

void* operator new(std::size_t n) {
  if (counting) {
    counting = false;  // dladdr is ours, not the step's
    ++(called_from_onednn(__builtin_return_address(0)) ? onednn_allocations : allocations);
    counting = true;
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace dptrain {
namespace {

// The largest malloc of the CPU GEMM library over the GEMMs of a step of
// these dense layers ({in, out} each), at each row count, called bare as
// the layers call it: y = x W^T, dW = dy^T x, dx = dy W.
std::size_t bare_gemm_largest_malloc(const std::vector<std::pair<int, int>>& layers,
                                     const std::vector<int>& row_counts) {
  std::vector<float> a(4096, 0.5f), b(4096, 0.25f), c(4096);
  largest_malloc = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms the library up
    counting = pass == 1;
    for (const int rows : row_counts)
      for (const auto& [in, out] : layers) {
        cpu_gemm::sgemm(false, true, rows, out, in, 1.0f, a.data(), in, b.data(), in, 0.0f,
                        c.data(), out);
        cpu_gemm::sgemm(true, false, out, in, rows, 1.0f, a.data(), out, b.data(), in, 0.0f,
                        c.data(), in);
        cpu_gemm::sgemm(false, false, rows, in, out, 1.0f, a.data(), out, b.data(), in, 0.0f,
                        c.data(), in);
      }
  }
  counting = false;
  const std::size_t largest = largest_malloc;
  largest_malloc = 0;
  mallocs = 0;
  return largest;
}

TEST(NoAllocation, StepsAfterWarmUpAllocateNothing) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string file;
  if (rank == 0) {
    file = testing::scratch_dir("noalloc") + "/d.h5";
    testing::FixtureSpec spec;
    spec.rows = 200;  // batch 16: a short last batch every epoch
    spec.classes = 4;
    testing::write_fixture(file, spec);
  }
  const std::uint64_t dim = 12, batch = 16, steps = 40;
  const BatchPlan plan(200, batch);
  std::unique_ptr<Dataset> data;
  std::unique_ptr<InputQueue> queue;
  if (rank == 0) {
    data = std::make_unique<Dataset>(file, "train");
    InputQueueConfig qc;
    qc.batch_size = batch;
    qc.shuffle.mode = ShuffleMode::kFull;
    qc.end_step = steps;
    queue = std::make_unique<InputQueue>(*data, qc);
  }
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int max_rows = max_shard_rows(batch, ranks);
  Model model(*be, parse_model_spec("dense:32,relu,dense:16,gelu,dense:4"), dim, max_rows);
  model.init(1);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdamW;
  Optimizer opt(*be, oc, model.num_params());
  InputPipeline input(MPI_COMM_WORLD, *be, queue.get(), max_rows, dim, 1, LabelType::kClass);
  GradientBuckets buckets(*comm, model.grads(),
                          plan_buckets(model.param_layout(), model.num_params(), 1));
  DeviceBuffer<float> stats(*be, 2);
  PhaseTimer timer;
  std::vector<std::pair<int, int>> dense;  // {in, out} of each weight [out, in]
  for (const ParamInfo& p : model.param_layout())
    if (p.name == "weight") dense.emplace_back(int(p.shape[1]), int(p.shape[0]));
  const std::size_t gemm_largest = bare_gemm_largest_malloc(
      dense, {int(plan.slot(0).rows), int(plan.slot(plan.steps_per_epoch() - 1).rows)});

  long counted = 0, counted_mallocs = 0, counted_steps = 0;
  input.start(plan.slot(0).rows);
  for (std::uint64_t s = 0; s < steps; ++s) {
    // Warm-up: the first epoch (every batch size seen once).
    counting = s >= plan.steps_per_epoch();
    allocations = 0;
    timer.start(static_cast<std::int64_t>(s));
    const Shard& shard = input.finish();
    if (s + 1 < steps) input.start(plan.slot(s + 1).rows);
    timer.lap(Phase::kData);
    EXPECT_TRUE(train_step(*be, *comm, model, opt, LossKind::kXent, shard, plan.slot(s).rows,
                           0.01f, stats.get(), &timer, &buckets, nullptr, &input));
    counting = false;
    counted += allocations;
    counted_mallocs += mallocs;
    mallocs = 0;
    if (s >= plan.steps_per_epoch()) ++counted_steps;
  }
  EXPECT_EQ(counted, 0) << "heap allocations on the training thread after warm-up";
  // Three dense layers: 3 forward GEMMs, 3 weight-gradient and 2
  // input-gradient GEMMs a step. On more ranks Open MPI's non-blocking
  // collectives (the bucketed all-reduces) build their schedules with malloc
  // too, so the count is bounded on one rank, where the step is ours alone.
  const long gemms_per_step = 8;
  std::printf("rank %d: %.1f mallocs a step after warm-up, the largest %zu bytes (%s bare: %zu)\n",
              rank, double(counted_mallocs) / double(std::max(1L, counted_steps)), largest_malloc,
              cpu_gemm::describe().c_str(), gemm_largest);
  if (ranks == 1)
    EXPECT_LE(counted_mallocs, gemms_per_step * counted_steps)
        << "mallocs in " << counted_steps << " steps beyond one per GEMM";
  // On more ranks Open MPI's schedules count too (up to 53 KB measured on
  // 2 to 4 ranks), so there the bound is at least the 64 KiB it always was.
  const std::size_t bound =
      ranks == 1 ? gemm_largest : std::max(gemm_largest, std::size_t(64) << 10);
  EXPECT_LE(largest_malloc, bound)
      << "an allocation inside the step larger than any its GEMMs (and on more ranks Open MPI's "
         "collectives) make";
}

// The same for a GPT on a token set: no operator new on the training
// thread once every batch size has been seen (attention's buffers, the
// batched GEMMs' primitives and the layer norm statistics are made when the
// model is built or on the first step of a shape).
TEST(NoAllocation, GptStepsAfterWarmUpAllocateNothing) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int t = 8, vocab = 11, rows = 60;
  std::string file;
  if (rank == 0) {
    file = testing::scratch_dir("noalloc_gpt") + "/tokens.h5";
    std::vector<std::int32_t> windows(static_cast<std::size_t>(rows) * (t + 1));
    for (std::size_t i = 0; i < windows.size(); ++i) windows[i] = static_cast<std::int32_t>((i * 7) % vocab);
    h5::File f = h5::create_file(file, ExitCode::kOther);
    h5::write_array(f.get(), "/train/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32,
                    {hsize_t(rows), hsize_t(t + 1)}, windows.data(), ExitCode::kOther);
    h5::DataSet d = h5::open_dataset(f.get(), "/train/tokens", ExitCode::kOther);
    h5::write_attr(d.get(), "vocab_size", std::int64_t{vocab}, ExitCode::kOther);
  }
  const std::uint64_t batch = 16, steps = 12;
  const BatchPlan plan(rows, batch);
  std::unique_ptr<Dataset> data;
  std::unique_ptr<InputQueue> queue;
  if (rank == 0) {
    data = std::make_unique<Dataset>(file, "train");
    InputQueueConfig qc;
    qc.batch_size = batch;
    qc.end_step = steps;
    qc.raw_features = true;
    queue = std::make_unique<InputQueue>(*data, qc);
  }
  auto be = make_backend("cpu", BackendOptions{});
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int max_rows = max_shard_rows(batch, ranks);
  Model model(*be,
              parse_model_spec("embed:16,pos,2*(res(ln,attn:2:causal),res(ln,dense:32,gelu:tanh,"
                               "dense:16)),ln,dense:11"),
              Shape{t}, max_rows, vocab);
  model.init(1);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdamW;
  oc.clip_grad_norm = 1.0f;
  Optimizer opt(*be, oc, model.num_params());
  InputPipeline input(MPI_COMM_WORLD, *be, queue.get(), max_rows, t, t, LabelType::kClass,
                      FeatureType::kTokenId);
  GradientBuckets buckets(*comm, model.grads(),
                          plan_buckets(model.param_layout(), model.num_params(), 1));
  DeviceBuffer<float> stats(*be, 2);
  long counted = 0, library = 0, counted_steps = 0;
  input.start(plan.slot(0).rows);
  for (std::uint64_t s = 0; s < steps; ++s) {
    counting = s >= plan.steps_per_epoch();
    allocations = onednn_allocations = 0;
    const Shard& shard = input.finish();
    if (s + 1 < steps) input.start(plan.slot(s + 1).rows);
    EXPECT_TRUE(train_step(*be, *comm, model, opt, LossKind::kXent, shard, plan.slot(s).rows,
                           0.01f, stats.get(), nullptr, &buckets, nullptr, &input));
    counting = false;
    counted += allocations;
    library += onednn_allocations;
    mallocs = 0;
    if (s >= plan.steps_per_epoch()) ++counted_steps;
  }
  EXPECT_EQ(counted, 0) << "heap allocations on the training thread in a warmed-up GPT step";
  // Two attention layers make 2 + 4 batched GEMMs a step each: 12 oneDNN
  // executions, each allocating its argument map (measured: 6 a call).
  const long executions = 12 * counted_steps;
  std::printf("rank %d: oneDNN allocated %.1f times a GPT step (%ld primitive runs a step)\n", rank,
              double(library) / double(std::max(1L, counted_steps)), executions / std::max(1L, counted_steps));
  EXPECT_LE(library, 8 * executions) << "oneDNN allocates more per primitive run than its argument map";
}

}  // namespace
}  // namespace dptrain
