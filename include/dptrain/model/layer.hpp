// Implements: the Layer interface of docs/design.md section 1 — one object per
// --model token, built once per model with its input shape: output shape,
// the parameters and non-trained buffers it owns (ParamInfo: name, torch
// shape, offset in the model's arena), initialization, forward and
// backward. A layer knows shapes, parameters and math; devices only through
// the Backend it is handed, ranks not at all.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/backends/backend.hpp"
#include "dptrain/model/activation_arena.hpp"
#include "dptrain/model/tensor.hpp"

namespace dptrain {

// Purpose word for mix_seed, so init draws never coincide with shuffle or
// dropout draws made from the same --seed.
inline constexpr std::uint64_t kInitPurpose = 0x696e6974;  // "init"

// Training or evaluation: layers such as dropout and batch norm compute
// differently in eval (Layer::differs_in_eval says which do). kRecompute is
// a training forward run again in backward (--recompute blocks): it must
// write what the first one wrote, bit for bit, and change no state (batch
// norm normalizes with the statistics it kept, updates no running
// statistics and makes no collective).
enum class Mode { kTrain, kEval, kRecompute };

// One tensor of a model's parameter or buffer arena, stored in checkpoints
// as /model/<layer>/<name> (docs/design.md section 4).
struct ParamInfo {
  std::string layer;               // "dense0": the layer kind and its index among that kind
  std::string name;                // "weight", "bias", "running_mean", ...
  std::vector<std::size_t> shape;  // torch.nn layout, e.g. {out, in} for a dense weight
  std::size_t offset = 0;          // into the arena, in floats
  std::size_t count = 0;           // product of shape

  std::string path() const { return layer + "/" + name; }
  friend bool operator==(const ParamInfo&, const ParamInfo&) = default;
};

// A stretch of the parameter arena: [offset, offset + count) floats.
struct ArenaRange {
  std::size_t offset = 0, count = 0;
};

// A base such that base + offset == at: how a slice or a gathered unit of an
// arena stands in for the whole arena (layers and the optimizer address
// parameters by arena offset). Computed through an integer, since base
// itself may lie outside any buffer; only base + offsets within the
// buffer's range are ever used.
inline float* arena_base(float* at, std::size_t offset) {
  return reinterpret_cast<float*>(reinterpret_cast<std::uintptr_t>(at) - offset * sizeof(float));
}

// Floats in an arena laid out as `tensors` (end of the last one).
std::size_t arena_size(const std::vector<ParamInfo>& tensors);
// Arena offset where each layer's tensors begin, in arena (= layer) order;
// consecutive tensors with the same layer name belong to one layer.
std::vector<std::size_t> layer_begins(const std::vector<ParamInfo>& tensors);
// "[3, 5]"
std::string dims_string(const std::vector<std::size_t>& dims);

// The parameters rounded to bf16 (ConvertKernels::to_bf16's bits), laid out
// as the parameter arena: parameter i at data[i]. A model keeps this twin
// where the backend rounds GEMM operands and the model holds its whole
// arena (Model::params_bf16); the model brings it up to date before a pass
// reads it, so a layer's GEMMs read their weights' copies there and no layer
// rounds a weight of its own. data is null on a model that only plans.
struct ParamsBf16 {
  const std::uint16_t* data = nullptr;
};

// Where a layer's tensors live: the model's arenas (device memory when
// bound for compute, host memory when handed to init). grads is laid out
// like params.
// activations: where the layer reserves what it keeps per row (the model's
// activation arena); nullptr for a layer used on its own, which then owns
// its buffers.
// params_bf16: the model's bf16 twin of the parameter arena (ParamsBf16),
// where it keeps one; nullptr where each layer rounds its own weights.
struct ArenaPointers {
  float* params = nullptr;
  float* grads = nullptr;
  float* buffers = nullptr;
  ActivationArena* activations = nullptr;
  const ParamsBf16* params_bf16 = nullptr;
};

// What Layer::reserve_bytes reserves for a layer bound to `arenas`: a slot
// of their activation arena, or memory of its own where they have none.
template <typename T>
ArenaBuffer<T> reserve_in(const ArenaPointers& arenas, Backend& be, int max_rows, RowBytes bytes,
                          Lifetime life) {
  const std::size_t count = bytes(max_rows) / sizeof(T);
  if (!arenas.activations) return ArenaBuffer<T>(be, count);
  return ArenaBuffer<T>(arenas.activations, arenas.activations->reserve(std::move(bytes), life),
                        count);
}

// The sum over every replica of the model (every rank's tower) of a few
// values in backend memory, in place: what batch norm over the global batch
// needs in the middle of a step. Collective: every replica calls it in the
// same order. The trainer times it as communication.
class ReplicaSum {
 public:
  virtual ~ReplicaSum() = default;
  virtual void sum(float* data, std::size_t n) = 0;
};

// What a layer may need of the step it runs in, besides its input (set by
// the model's owner before each forward; Model::set_step):
// - per-sample randomness (dropout) is a function of (seed, epoch, global
//   position of the sample in the epoch) only, so a run on P ranks draws what
//   a run on 1 rank draws: row r of this shard is position first_row + r;
// - statistics over the global batch (bn) sum over `replicas` and divide by
//   batch_rows, the rows of the whole global batch. replicas == nullptr: this
//   shard is the whole batch (one rank, evaluation, tests).
struct StepInfo {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::uint64_t first_row = 0;
  std::uint64_t batch_rows = 0;  // 0: the rows of the shard itself
  ReplicaSum* replicas = nullptr;
};

// The samples of the fp32 scratch in which a layer writing its output only
// as bf16 (Layer::write_output_bf16_only) folds an epilogue the library
// cannot fuse (Backend::gemm_epilogue_bf16's chunks): as many as 16 MiB
// holds, at least one, at most `rows`.
inline int bf16_output_scratch_samples(std::size_t floats_per_sample, int rows) {
  constexpr std::size_t kBytes = std::size_t(16) << 20;
  const std::size_t fit = kBytes / (floats_per_sample * sizeof(float) + 1);
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(fit, std::size_t(rows))));
}
class LayerBuilder;

// What a layer is built from besides its own spec.
struct LayerContext {
  Shape input;                    // per sample
  std::string name;               // "dense0", "relu1": kind + index among that kind
  int index = 0;                  // the index in name (dense layers seed their init with it)
  std::size_t param_offset = 0;   // where this layer's parameters start in the arena
  std::size_t buffer_offset = 0;  // and its buffers in the buffer arena
  LayerBuilder* builder = nullptr;  // builds the parts of a block (res), in spec order
  // The vocabulary when this layer reads token ids [N, T] (the first layer
  // of a model trained on a token set, docs/design.md section 3), else 0.
  int vocab = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return input_; }
  const Shape& output_shape() const { return output_; }
  // Trained tensors (optimizer, gradients, all-reduce) and non-trained ones
  // (checkpointed, never reduced), with offsets into the model's arenas.
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamInfo>& buffers() const { return buffers_; }

  // The --model token this layer parses from, in canonical form ("dense:10").
  virtual std::string spec() const = 0;
  // True for rectifiers (relu, gelu): the layer before one initializes for
  // its gain (He-uniform instead of Glorot-uniform).
  virtual bool rectifies() const { return false; }
  // True when forward(..., Mode::kEval) computes something else than in training.
  virtual bool differs_in_eval() const { return false; }
  // False for a layer whose backward never reads y, its forward's output
  // (dense): as the model's last layer, its output buffer then also holds
  // the loss's gradient (the logits' gradient written over the logits), so
  // that no second [rows, output] buffer exists.
  virtual bool backward_reads_output() const { return true; }
  // False for a layer whose backward never reads its input x (tanh,
  // sigmoid), or reads it only through a copy it keeps itself, known after
  // allocate(): dense and attn where the backend rounds GEMM operands to
  // bf16 (RoundedOperand) keep x's rounding for their weight gradients.
  // Inside a block, the part before such a layer then keeps its output only
  // for a pass, not until backward (Residual).
  virtual bool backward_reads_input() const { return true; }
  // Where this layer's backward would round its output gradient dy to bf16
  // for its GEMMs (RoundedOperand; CUDA under --precision bf16), known
  // after allocate(); nullptr where it rounds nothing. As the model's last
  // layer, the loss writes the rounding there in the pass that writes the
  // gradient and backward gets it as dy.bf16 (Model::output_grad_bf16): a
  // slot of the per-pass region, so valid from the loss to this layer's
  // backward, which nothing runs in between.
  virtual std::uint16_t* output_grad_bf16() const { return nullptr; }
  // The same for forward's input: where this layer rounds x to bf16 for its
  // GEMMs and keeps the copy for backward (dense, attn), known after
  // allocate(); nullptr where it rounds nothing. Inside a block, a part
  // before it that writes_output_bf16() gets this slot as y.bf16 and writes
  // the rounding there in the pass that writes y; this layer's forward then
  // finds it in x.bf16 and makes no pass of its own.
  virtual std::uint16_t* input_bf16() const { return nullptr; }
  // True where forward writes y's bf16 rounding into y.bf16 when the view
  // carries one (ln).
  virtual bool writes_output_bf16() const { return false; }
  // Said by a block, after allocate, to a part whose output the next part
  // reads in bf16 alone where it has an input_bf16() slot (its backward
  // reads no fp32 input, this part's backward no output): a part that
  // writes the copy may then leave the fp32 output unwritten whenever it is
  // handed the slot (ln).
  virtual void output_read_in_bf16_only() {}
  // True where backward_input writes dx's bf16 rounding into dx.bf16 when
  // the view carries one (res with the identity shortcut: its sum). The
  // model then hands it on with dx to the layer before, as its dy.
  virtual bool writes_input_grad_bf16() const { return false; }

  // Asked by the model of its last layer, before allocate(), where the run
  // wants the logits in bf16 (Model's Logits::kBf16: --precision bf16 with
  // --loss xent): true where this layer will then write its output only as
  // bf16, into output_grad_bf16()'s slot (the loss reads the logits there
  // and writes their gradient over them; backward gets the slot as
  // dy.bf16): a per-pass slot, since between the last layer's forward and
  // its backward only the loss runs. forward's y.data is then scratch
  // of bf16_output_scratch_samples() samples. Dense on a backend that
  // rounds GEMM operands says yes; the default, no.
  virtual bool write_output_bf16_only(Backend& /*be*/) { return false; }
  // Called once by the model after construction: a layer that saves
  // buffers for its backward (masks, statistics) reserves them here, for
  // max_rows rows (reserve), so that no step allocates. A layer whose
  // forward reads nothing but its input, parameters and step may be run
  // again in backward (Mode::kRecompute).
  virtual void allocate(Backend& /*be*/, int /*max_rows*/) {}
  // Fills this layer's slices of the host arenas (zero-filled before the
  // first layer's call) from the seed alone.
  virtual void init(std::uint64_t /*seed*/, bool /*next_rectifies*/,
                    const ArenaPointers& /*host*/) const {}

  // y = f(x); x.shape is input_shape() and y.shape output_shape(), rows >= 1.
  virtual void forward(Backend& be, ConstTensorView x, TensorView y, Mode mode) = 0;
  // Overwrites this layer's slice of the gradient arena from x and the
  // gradient dy w.r.t. its output. Only called for layers with parameters.
  virtual void backward_params(Backend& /*be*/, ConstTensorView /*x*/, ConstTensorView /*dy*/) {}
  // dx = the gradient w.r.t. the input, from x, the output y of forward and dy.
  virtual void backward_input(Backend& be, ConstTensorView x, ConstTensorView y,
                              ConstTensorView dy, TensorView dx) = 0;

  // backward_input with `add` added to dx (a block's identity shortcut's
  // gradient, when this layer is the block's first part), and dx's bf16
  // rounding into dx.bf16 where the view carries one: one pass where the
  // layer's kernel can add (ln), else backward_input, then Backend::sum.
  // The bits are those of backward_input into a buffer of its own and then
  // the sum. dx may not alias dy or add.
  virtual void backward_input_adding(Backend& be, ConstTensorView x, ConstTensorView y,
                                     ConstTensorView dy, TensorView dx, ConstTensorView add);
  // forward with `add` added to y (a block's identity shortcut, when this
  // layer is the block's last part and its backward reads no output):
  // forward_adds() says that the layer's last product adds it as it
  // writes y (the GEMM epilogue kBiasAdd: dense, attn), so the block makes
  // no sum pass. The default is forward, then Backend::add. y may not
  // alias x or add.
  virtual bool forward_adds() const { return false; }
  virtual void forward_adding(Backend& be, ConstTensorView x, ConstTensorView add, TensorView y,
                              Mode mode);
  // Folding an activation into this layer's GEMM epilogue, inside a
  // block's chain of parts (res(...)), where the backend fuses epilogues:
  // folds_next(next) lets the block call forward_folding_next in place of
  // this layer's forward and next's: it writes this layer's output y (next's
  // input, which next's backward reads) and next's output next_y.
  // folds_previous(prev) lets it call backward_input_folding_previous in
  // place of this layer's backward_input and prev's: the gradient w.r.t.
  // prev's input prev_x, from this layer's x and dy. Asked after allocate().
  virtual bool folds_next(const Layer& /*next*/) const { return false; }
  virtual bool folds_previous(const Layer& /*prev*/) const { return false; }
  virtual void forward_folding_next(Backend& /*be*/, ConstTensorView /*x*/, TensorView /*y*/,
                                    TensorView /*next_y*/, Mode /*mode*/) {
    throw_no_folding();
  }
  virtual void backward_input_folding_previous(Backend& /*be*/, ConstTensorView /*x*/,
                                               ConstTensorView /*prev_x*/, ConstTensorView /*dy*/,
                                               TensorView /*prev_dx*/) {
    throw_no_folding();
  }

  // Taking the next layer into this layer's own passes, in the model's
  // chain of top-level layers and in a block's chains (bn and the relu
  // after it): absorbs_next(next) lets the model (or the block) call
  // forward_absorbing_next in place of this layer's forward and next's (it
  // writes next's output next_y; this layer's own output is not written),
  // and backward_params_absorbing_next and backward_input_absorbing_next in
  // place of next's backward_input and this layer's two passes, from
  // next_y and the gradient w.r.t. it, next_dy. The bits are those of the
  // two layers' own passes. Asked after allocate().
  virtual bool absorbs_next(const Layer& /*next*/) const { return false; }
  virtual void forward_absorbing_next(Backend& /*be*/, ConstTensorView /*x*/,
                                      TensorView /*next_y*/, Mode /*mode*/) {
    throw_no_folding();
  }
  virtual void backward_params_absorbing_next(Backend& /*be*/, ConstTensorView /*x*/,
                                              ConstTensorView /*next_y*/,
                                              ConstTensorView /*next_dy*/) {
    throw_no_folding();
  }
  virtual void backward_input_absorbing_next(Backend& /*be*/, ConstTensorView /*x*/,
                                             ConstTensorView /*next_y*/,
                                             ConstTensorView /*next_dy*/, TensorView /*dx*/) {
    throw_no_folding();
  }

  // True for a layer that takes part in collectives in training (bn over
  // the global batch): the model then runs it on empty shards too, through
  // forward_empty and backward_empty, so every replica makes the same calls.
  virtual bool communicates() const { return false; }
  // The collectives of forward / backward for a shard of no rows: zeros in.
  virtual void forward_empty(Backend& /*be*/) {}
  virtual void backward_empty(Backend& /*be*/) {}

  // How this layer computes where the backend and options leave it a choice
  // ("attention fused"), known after allocate(): appended to `out`, one
  // entry a layer. A block adds its parts'.
  virtual void implementations(std::vector<std::string>& /*out*/) const {}

  // Queues, after the work queued so far, what the next training forward
  // reads of step() from device memory (dropout's draw), where that
  // changed. Called before a pass is recorded or replayed (Model::
  // stage_step), so that the recorded pass reads each step's values; a
  // layer's forward stages itself too. A layer holding others stages them.
  virtual void stage_step(Backend& /*be*/) {}

  // Points this layer at the model's arenas and step information (once,
  // after they exist). A layer holding others (res) binds them too.
  // step == nullptr: a shard that is the whole batch, seed and epoch 0.
  virtual void bind(const ArenaPointers& arenas, const StepInfo* step = nullptr) {
    static const StepInfo whole_batch;
    arenas_ = arenas;
    step_ = step ? step : &whole_batch;
  }

 protected:
  Layer(const LayerContext& ctx, const Shape& output);

  // Declares the next tensor of this layer (in arena order); returns its
  // offset in the arena. "part/name" names a tensor of a part of the layer
  // (attn0's "out_proj/weight": ParamInfo layer "attn0/out_proj").
  std::size_t add_param(std::string name, std::vector<std::size_t> shape);
  std::size_t add_buffer(std::string name, std::vector<std::size_t> shape);
  // A block takes on the tensors of a part it holds, which must come next in
  // the arenas (the builder built it after this layer's own tensors).
  void adopt_tensors(const Layer& part);

  const ArenaPointers& arenas() const { return arenas_; }

  // A buffer of per_row values of T per row, for max_rows rows: a slot of
  // the model's activation arena (usable once the model has allocated it,
  // before the first forward), or memory of its own when the layer is not
  // bound to an arena. Call from allocate().
  template <typename T>
  ArenaBuffer<T> reserve(Backend& be, int max_rows, std::size_t per_row, Lifetime life) const {
    return reserve_bytes<T>(
        be, max_rows, [per_row](int rows) { return std::size_t(rows) * per_row * sizeof(T); },
        life);
  }
  // The same with the bytes any function of the rows (a kernel's workspace).
  template <typename T>
  ArenaBuffer<T> reserve_bytes(Backend& be, int max_rows, RowBytes bytes, Lifetime life) const {
    return reserve_in<T>(arenas_, be, max_rows, std::move(bytes), life);
  }
  // The step being run (never null once bound).
  const StepInfo& step() const { return *step_; }

 private:
  [[noreturn]] void throw_no_folding() const;

  std::string name_;
  Shape input_, output_;
  std::vector<ParamInfo> params_, buffers_;
  std::size_t next_param_, next_buffer_;
  ArenaPointers arenas_;
  const StepInfo* step_ = nullptr;
};

}  // namespace dptrain
