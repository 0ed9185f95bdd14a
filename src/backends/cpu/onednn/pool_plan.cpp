// Implements: the CPU pooling plan (spatial_plans.hpp): oneDNN
// pooling_forward / pooling_backward per row count, no padding (windows
// past the end drop, as torch's floor mode). The layers exchange plain
// nchw / ncdhw tensors; from kBlockedFrom channels on, the primitives run
// on channel-blocked copies (nChw8c / nChw16c), reordered in and out:
// oneDNN 2.6 has only a simple loop for plain layouts, measured on AVX2 at
// 2.8x the time of its JIT kernel (max pooling 2x2 on [64, 32, 28, 28],
// forward + backward, 106 ms against 38 ms). Max pooling's backward reads
// the workspace its forward wrote: the plan owns it, sized for max_rows
// when the plan is made.
#include <array>
#include <vector>

#include "backends/cpu/onednn/engine.hpp"
#include "backends/cpu/onednn/spatial_plans.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain::onednn {
namespace {

using dnnl::memory;

constexpr int kBlockedFrom = 8;  // channels

struct PoolPass {
  dnnl::primitive primitive;
  Operand input, output;  // forward: x, y; backward: dy, dx
  memory workspace, scratch;
  std::vector<dnnl_exec_arg_t> args;
};

class OnednnPoolPlan final : public PoolPlan {
 public:
  explicit OnednnPoolPlan(const PoolGeometry& g)
      : g_(g), by_rows_(static_cast<std::size_t>(g.max_rows) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "pooling is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a pooling plan needs max_rows >= 1");
    for (AlignedBytes* b : {&scratch_, &workspace_, &buffers_[0], &buffers_[1]})
      b->reserve(AlignedBytes::kAlignment);  // never a null handle, even when unused
    passes(g.max_rows);  // sizes the workspace and buffers for the largest batch
  }

  void forward(const float* x, float* y, int rows) override { run(passes(rows)[0], x, y); }
  void backward(const float* dy, float* dx, int rows) override { run(passes(rows)[1], dy, dx); }

  std::size_t objects_created() const override { return created_; }

 private:
  using Passes = std::array<PoolPass, 2>;  // forward, backward

  Passes& passes(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "pooling over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) slot = create(rows);
    return *slot;
  }

  void run(PoolPass& p, const float* in, float* out) {
    bind(p.input, in, buffers_[0]);
    bind(p.output, out, buffers_[1]);
    p.workspace.set_data_handle(workspace_.data());
    p.scratch.set_data_handle(scratch_.data());
    execute(p.primitive, p.args);
    store(p.output);
    cpu_stream().wait();
  }

  // The pass's arguments: its operands under in_id and out_id, then the
  // workspace and scratchpad.
  void finish(PoolPass& p, const dnnl::primitive_desc_base& pd, int in_id, int out_id,
              const memory::desc& workspace) {
    p.workspace = memory(workspace, cpu_engine(), DNNL_MEMORY_NONE);
    p.scratch = memory(pd.scratchpad_desc(), cpu_engine(), DNNL_MEMORY_NONE);
    created_ += 3;  // and the primitive
    p.args = {{in_id, p.input.inner.get()},
              {out_id, p.output.inner.get()},
              {DNNL_ARG_WORKSPACE, p.workspace.get()},
              {DNNL_ARG_SCRATCHPAD, p.scratch.get()}};
    scratch_.reserve(pd.scratchpad_desc().get_size());
  }

  std::unique_ptr<Passes> create(int rows) {
    const dnnl::engine& eng = cpu_engine();
    const memory::desc x = activation_desc(rows, g_.channels, g_.dims, g_.input);
    const memory::desc y = activation_desc(rows, g_.channels, g_.dims, g_.output);
    const bool blocked = g_.channels >= kBlockedFrom;
    const memory::desc x_in =
        blocked ? blocked_activation_desc(rows, g_.channels, g_.dims, g_.input) : x;
    const memory::desc y_in =
        blocked ? blocked_activation_desc(rows, g_.channels, g_.dims, g_.output) : y;
    const memory::dims strides = spatial_dims(g_.dims, g_.stride);
    const memory::dims window = spatial_dims(g_.dims, g_.window);
    const memory::dims no_pad(static_cast<std::size_t>(g_.dims), 0);
    // No padding, so excluding it or not is the same average.
    const auto algo = g_.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                                : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::primitive_attr attr = user_scratchpad();
    const dnnl::pooling_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, algo, x_in, y_in, strides, window, no_pad, no_pad},
        attr, eng);
    const dnnl::pooling_backward::primitive_desc bwd(
        {algo, x_in, y_in, strides, window, no_pad, no_pad}, attr, eng, fwd);

    auto passes = std::make_unique<Passes>();
    PoolPass& f = (*passes)[0];
    f.primitive = dnnl::pooling_forward(fwd);
    f.input = make_operand(x, fwd.src_desc(), false, buffers_[0], created_);
    f.output = make_operand(y, fwd.dst_desc(), true, buffers_[1], created_);
    finish(f, fwd, DNNL_ARG_SRC, DNNL_ARG_DST, fwd.workspace_desc());
    PoolPass& b = (*passes)[1];
    b.primitive = dnnl::pooling_backward(bwd);
    b.input = make_operand(y, bwd.diff_dst_desc(), false, buffers_[0], created_);
    b.output = make_operand(x, bwd.diff_src_desc(), true, buffers_[1], created_);
    finish(b, bwd, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, fwd.workspace_desc());
    // The workspace of max_rows rows (made first) holds that of any fewer.
    workspace_.reserve(fwd.workspace_desc().get_size());
    return passes;
  }

  PoolGeometry g_;
  std::vector<std::unique_ptr<Passes>> by_rows_;  // [rows], made on first use
  // Reordered input and output of a pass; passes never run at once.
  std::array<AlignedBytes, 2> buffers_;
  AlignedBytes scratch_, workspace_;
  std::size_t created_ = 0;
};

}  // namespace

std::unique_ptr<PoolPlan> make_pool_plan(const PoolGeometry& g) {
  return std::make_unique<OnednnPoolPlan>(g);
}

}  // namespace dptrain::onednn
