// Implements: the activation arena — one device allocation for everything a
// model keeps per row between and within its passes (layer outputs,
// gradient buffers, the layers' saved tensors and workspaces), laid out
// once from reservations that know their size as a function of the rows.
// The layout is the memory plan: the run allocates layout(max_rows), and
// `train --plan-only` asks the same layout for any row count.
//
// Each reservation belongs to a scope: the model's own buffers, or one
// top-level layer (a block counts as one, its parts inside it). A scope's
// reservations are either saved (written in forward, read in backward) or
// per pass (used within one forward or one backward of that layer). Only
// one top-level layer runs at a time, so all scopes' per-pass buffers share
// one region; saved buffers are kept side by side, except under
// --recompute blocks, where a recomputed layer's saved buffers join the
// shared region too and its forward runs again right before its backward.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"

namespace dptrain {

// How long a layer's buffer must hold what is written to it.
enum class Lifetime {
  kSaved,  // from the layer's forward to its backward
  kPass,   // within one forward or one backward of its top-level layer
};

// The bytes a reservation needs for `rows` rows.
using RowBytes = std::function<std::size_t(int rows)>;

class ActivationArena {
 public:
  // The bytes of every buffer are rounded up to this, so buffers start
  // aligned for vector loads and tensor-core tiles.
  static constexpr std::size_t kAlignment = 256;

  // What the next reservations belong to: the model's own buffers, or the
  // top-level layer `index`. needs_backward: false for a layer the model
  // never runs backward (before the first layer with parameters); its saved
  // buffers then only need to last a pass. may_recompute: false where the
  // model cannot run the layer's forward again (docs in Model).
  void begin_model_scope();
  void begin_layer(std::size_t index, bool needs_backward, bool may_recompute);

  // Reserves a buffer in the current scope; returns its slot.
  std::size_t reserve(RowBytes bytes, Lifetime life);

  // True when the layer's forward runs again before its backward under
  // --recompute blocks: a layer that keeps saved buffers, needs backward
  // and may be recomputed.
  bool recomputes(std::size_t layer, bool recompute) const;

  // The arena's bytes for `rows` rows, with recomputation or without: the
  // layout's end (total), and of it what holds activations kept for
  // backward (saved: the model's saved buffers, those of layers kept whole,
  // and under recomputation the largest recomputed layer's); the rest is
  // workspace. Pure arithmetic on the reservations, no allocation.
  struct Bytes {
    std::size_t total = 0, saved = 0;
  };
  Bytes bytes(int rows, bool recompute) const;

  // Lays the reservations out for `rows` and allocates the arena (once).
  void allocate(Backend& be, int rows, bool recompute);
  bool allocated() const { return allocated_; }
  // The start of a slot's buffer, once allocated.
  void* address(std::size_t slot) const;

 private:
  struct Slot {
    RowBytes bytes;
    Lifetime life;
    int scope;  // -1: the model's own; else an index into scopes_
  };
  struct Scope {
    std::size_t layer;
    bool needs_backward, may_recompute, has_saved = false;
  };
  // Offsets of every slot for `rows`, and the layout's bytes.
  std::pair<std::vector<std::size_t>, Bytes> layout(int rows, bool recompute) const;
  bool recomputed(const Scope& s, bool recompute) const;

  std::vector<Slot> slots_;
  std::vector<Scope> scopes_;
  int current_ = -1;
  bool allocated_ = false;
  std::vector<std::size_t> offsets_;
  DeviceBuffer<std::byte> memory_;
};

// A buffer of T a layer keeps: a slot of the model's activation arena, or,
// for a layer used on its own (tests, benchmarks), memory it owns.
template <typename T>
class ArenaBuffer {
 public:
  ArenaBuffer() = default;
  ArenaBuffer(Backend& be, std::size_t count) : own_(be, count), count_(count) {}
  ArenaBuffer(const ActivationArena* arena, std::size_t slot, std::size_t count)
      : arena_(arena), slot_(slot), count_(count) {}
  T* get() const {
    return arena_ ? static_cast<T*>(arena_->address(slot_)) : own_.get();
  }
  std::size_t size() const noexcept { return count_; }

 private:
  DeviceBuffer<T> own_;
  const ActivationArena* arena_ = nullptr;
  std::size_t slot_ = 0;
  std::size_t count_ = 0;
};

}  // namespace dptrain
