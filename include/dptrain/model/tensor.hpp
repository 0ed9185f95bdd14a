// Implements: per-sample tensor shapes and the tensor views layers read and
// write (docs/design.md section 2: [N, F] once flat, [N, T, D] sequences,
// [N, C, H, W] images, [N, C, D, H, W] volumes — so a per-sample shape of
// rank 2 is always a sequence {T, D}). A Shape leaves N out; the row count
// travels in the view. Both are fixed-size values, so passing them around
// in a step never allocates. A model whose data are token ids [N, T] gets
// them in its float input buffer as int32 bit patterns (exact for any
// vocabulary; only its first layer, embed, reads them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

namespace dptrain {

class Shape {
 public:
  static constexpr int kMaxRank = 4;  // {C, D, H, W}

  Shape() = default;
  // Throws Error(kOther) for a rank above kMaxRank or a dimension below 1.
  Shape(std::initializer_list<int> dims);

  int rank() const { return rank_; }
  int operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  // Values per sample: the product of the dimensions (1 for rank 0).
  std::size_t size() const;
  // The same values as one flat feature vector {size()}.
  Shape flattened() const;
  std::string to_string() const;  // "[3, 28, 28]"

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

 private:
  std::array<int, kMaxRank> dims_{};
  int rank_ = 0;
};

// `rows` samples of `shape`, stored contiguously row-major at `data` (device
// memory of the backend in use). `bf16`, where not null, holds the same
// values rounded to bf16 (nearest even, ConvertKernels::to_bf16's bits),
// made by the tensor's producer in the pass that wrote it: a consumer whose
// GEMMs read bf16 operands (RoundedOperand) reads that copy instead of
// rounding the tensor again: the loss's gradient (Layer::output_grad_bf16),
// a layer norm's output inside a block (Layer::input_bf16) and a block's
// input gradient (Layer::writes_input_grad_bf16) carry one under bf16.
template <typename T>
struct BasicTensorView {
  using Bf16 = std::conditional_t<std::is_const_v<T>, const std::uint16_t, std::uint16_t>;
  T* data = nullptr;
  int rows = 0;
  Shape shape;
  Bf16* bf16 = nullptr;

  BasicTensorView() = default;
  BasicTensorView(T* d, int r, const Shape& s, Bf16* rounded = nullptr)
      : data(d), rows(r), shape(s), bf16(rounded) {}
  // A writable view reads as a read-only one.
  template <typename U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  BasicTensorView(const BasicTensorView<U>& o)
      : data(o.data), rows(o.rows), shape(o.shape), bf16(o.bf16) {}

  std::size_t count() const { return static_cast<std::size_t>(rows) * shape.size(); }
  // Features per row when the sample is read as flat.
  int row_width() const { return static_cast<int>(shape.size()); }
};

using TensorView = BasicTensorView<float>;
using ConstTensorView = BasicTensorView<const float>;

}  // namespace dptrain
