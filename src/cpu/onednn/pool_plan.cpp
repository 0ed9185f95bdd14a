// Implements: the CPU pooling plan (spatial_plans.hpp): oneDNN
// pooling_forward / pooling_backward per row count on plain nchw / ncdhw
// tensors, no padding (windows past the end drop, as torch's floor mode).
// Max pooling's backward reads the workspace its forward wrote: the plan
// owns it, sized for max_rows when the plan is made.
#include <vector>

#include "cpu/onednn/engine.hpp"
#include "cpu/onednn/spatial_plans.hpp"
#include "dptrain/error.hpp"

namespace dptrain::onednn {
namespace {

using dnnl::memory;

struct PoolPrimitives {
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
  memory input, output, workspace;  // x or dx, y or dy: handles set per call
  memory forward_scratch, backward_scratch;
  std::vector<dnnl_exec_arg_t> forward_args, backward_args;
};

class OnednnPoolPlan final : public PoolPlan {
 public:
  explicit OnednnPoolPlan(const PoolGeometry& g)
      : g_(g), by_rows_(static_cast<std::size_t>(g.max_rows) + 1) {
    DPT_REQUIRE(g.dims == 2 || g.dims == 3, ExitCode::kOther, "pooling is 2-D or 3-D");
    DPT_REQUIRE(g.max_rows >= 1, ExitCode::kOther, "a pooling plan needs max_rows >= 1");
    scratch_.reserve(AlignedBytes::kAlignment);
    workspace_.reserve(AlignedBytes::kAlignment);
    primitives(g.max_rows);  // sizes the workspace and scratchpad for the largest batch
  }

  void forward(const float* x, float* y, int rows) override {
    PoolPrimitives& p = primitives(rows);
    p.input.set_data_handle(const_cast<float*>(x));
    p.output.set_data_handle(y);
    p.workspace.set_data_handle(workspace_.data());
    p.forward_scratch.set_data_handle(scratch_.data());
    execute(p.forward, p.forward_args);
    cpu_stream().wait();
  }

  void backward(const float* dy, float* dx, int rows) override {
    PoolPrimitives& p = primitives(rows);
    p.output.set_data_handle(const_cast<float*>(dy));
    p.input.set_data_handle(dx);
    p.workspace.set_data_handle(workspace_.data());
    p.backward_scratch.set_data_handle(scratch_.data());
    execute(p.backward, p.backward_args);
    cpu_stream().wait();
  }

  std::size_t objects_created() const override { return created_; }

 private:
  PoolPrimitives& primitives(int rows) {
    DPT_REQUIRE(rows >= 1 && rows <= g_.max_rows, ExitCode::kOther,
                "pooling over " + std::to_string(rows) + " rows; the plan takes 1 to " +
                    std::to_string(g_.max_rows));
    auto& slot = by_rows_[static_cast<std::size_t>(rows)];
    if (!slot) slot = create(rows);
    return *slot;
  }

  memory make_memory(const memory::desc& md) {
    ++created_;
    return memory(md, cpu_engine(), DNNL_MEMORY_NONE);
  }

  std::unique_ptr<PoolPrimitives> create(int rows) {
    const dnnl::engine& eng = cpu_engine();
    const memory::desc x_md = activation_desc(rows, g_.channels, g_.dims, g_.input);
    const memory::desc y_md = activation_desc(rows, g_.channels, g_.dims, g_.output);
    const memory::dims strides = spatial_dims(g_.dims, g_.stride);
    const memory::dims window = spatial_dims(g_.dims, g_.window);
    const memory::dims no_pad(static_cast<std::size_t>(g_.dims), 0);
    // No padding, so excluding it or not is the same average.
    const auto algo = g_.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                                : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::primitive_attr attr = user_scratchpad();

    const dnnl::pooling_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, algo, x_md, y_md, strides, window, no_pad, no_pad},
        attr, eng);
    const dnnl::pooling_backward::primitive_desc bwd(
        {algo, x_md, y_md, strides, window, no_pad, no_pad}, attr, eng, fwd);

    auto p = std::make_unique<PoolPrimitives>();
    p->forward = dnnl::pooling_forward(fwd);
    p->backward = dnnl::pooling_backward(bwd);
    created_ += 2;
    p->input = make_memory(x_md);
    p->output = make_memory(y_md);
    p->workspace = make_memory(fwd.workspace_desc());
    p->forward_scratch = make_memory(fwd.scratchpad_desc());
    p->backward_scratch = make_memory(bwd.scratchpad_desc());
    p->forward_args = {{DNNL_ARG_SRC, p->input.get()},
                       {DNNL_ARG_DST, p->output.get()},
                       {DNNL_ARG_WORKSPACE, p->workspace.get()},
                       {DNNL_ARG_SCRATCHPAD, p->forward_scratch.get()}};
    p->backward_args = {{DNNL_ARG_DIFF_DST, p->output.get()},
                        {DNNL_ARG_DIFF_SRC, p->input.get()},
                        {DNNL_ARG_WORKSPACE, p->workspace.get()},
                        {DNNL_ARG_SCRATCHPAD, p->backward_scratch.get()}};
    // The workspace of max_rows rows (made first) holds that of any fewer.
    workspace_.reserve(fwd.workspace_desc().get_size());
    scratch_.reserve(fwd.scratchpad_desc().get_size());
    scratch_.reserve(bwd.scratchpad_desc().get_size());
    return p;
  }

  PoolGeometry g_;
  std::vector<std::unique_ptr<PoolPrimitives>> by_rows_;  // [rows], made on first use
  AlignedBytes scratch_, workspace_;
  std::size_t created_ = 0;
};

}  // namespace

std::unique_ptr<PoolPlan> make_pool_plan(const PoolGeometry& g) {
  return std::make_unique<OnednnPoolPlan>(g);
}

}  // namespace dptrain::onednn
