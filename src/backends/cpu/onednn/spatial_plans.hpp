// Implements: the CPU backend's convolution and pooling plans on oneDNN
// primitives (spatial_kernels.hpp), and what both share: the plain
// layouts of the tensors the layers exchange, and aligned byte buffers that
// a plan owns for oneDNN's scratchpad and max pooling's workspace.
// One set of primitives per row count, made on its first use and kept, so
// a warmed-up step creates no primitive and no dnnl::memory; arguments
// reach the kept memories through set_data_handle.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "backends/cpu/onednn/engine.hpp"
#include "dptrain/backends/kernels/spatial_kernels.hpp"

namespace dptrain::onednn {

std::unique_ptr<ConvPlan> make_conv_plan(const ConvGeometry& g);
std::unique_ptr<PoolPlan> make_pool_plan(const PoolGeometry& g);

// [rows, channels, (D,) H, W] in the plain layout (nchw / ncdhw), or with
// channels in blocks of the vector width oneDNN's kernels use here
// (nChw8c on AVX2, nChw16c on AVX-512; ncdhw likewise).
dnnl::memory::desc activation_desc(int rows, int channels, int dims, const SpatialExtent& e);
dnnl::memory::desc blocked_activation_desc(int rows, int channels, int dims,
                                           const SpatialExtent& e);
// The first `dims` entries of e.
dnnl::memory::dims spatial_dims(int dims, const SpatialExtent& e);

// Bytes aligned for vector loads, grown only (during warm-up), never copied.
class AlignedBytes {
 public:
  static constexpr std::size_t kAlignment = 64;
  AlignedBytes() = default;
  ~AlignedBytes() { release(); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;

  // Makes room for at least `bytes`; the old contents are lost.
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    release();
    data_ = static_cast<std::uint8_t*>(::operator new(bytes, std::align_val_t{kAlignment}));
    size_ = bytes;
  }
  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void release() noexcept {
    if (data_) ::operator delete(data_, std::align_val_t{kAlignment});
    data_ = nullptr;
    size_ = 0;
  }
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Primitive attributes of every spatial plan: the scratchpad is the plan's
// (user mode), so executing never allocates.
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// One tensor argument of a primitive: the plain memory the caller's pointer
// goes into, and the one the primitive reads or writes — the same object,
// or one over a plan-owned buffer in the primitive's layout, with the
// reorder between them (plain -> inner for an input, inner -> plain for an
// output).
struct Operand {
  dnnl::memory plain, inner;
  dnnl::reorder convert;
  std::vector<dnnl_exec_arg_t> convert_args;
  bool reordered = false;
  bool output = false;
};

// `plain` as the caller holds it, `wanted` as the primitive takes it; a
// reordered operand's buffer grows to fit. Adds the objects it makes to
// `created`.
Operand make_operand(const dnnl::memory::desc& plain, const dnnl::memory::desc& wanted,
                     bool output, AlignedBytes& buffer, std::size_t& created);
// Before the primitive: points the operand at the caller's data (and its
// buffer), and for a reordered input converts the data into the buffer.
void bind(Operand& o, const void* data, const AlignedBytes& buffer);
// The same for an input whose buffer holds its conversion already (an
// earlier pass made it from the same data): no reorder.
void bind_converted(Operand& o, const void* data, const AlignedBytes& buffer);
// After the primitive: a reordered output goes back to the caller's data.
void store(Operand& o);

}  // namespace dptrain::onednn
