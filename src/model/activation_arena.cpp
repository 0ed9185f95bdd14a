// Implements: the activation arena's layout (activation_arena.hpp):
//   [model's buffers][saved buffers of kept layers][shared region]
// where the shared region is as large as the largest top-level layer's
// per-pass buffers, plus its saved ones when it is recomputed.
#include "dptrain/model/activation_arena.hpp"

#include <algorithm>

#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

std::size_t aligned(std::size_t bytes) {
  const std::size_t a = ActivationArena::kAlignment;
  return (bytes + a - 1) / a * a;
}

}  // namespace

void ActivationArena::begin_model_scope() {
  DPT_REQUIRE(!allocated_, ExitCode::kOther, "activation arena: reservations after allocation");
  current_ = -1;
}

void ActivationArena::begin_layer(std::size_t index, bool needs_backward, bool may_recompute) {
  DPT_REQUIRE(!allocated_, ExitCode::kOther, "activation arena: reservations after allocation");
  scopes_.push_back({index, needs_backward, may_recompute});
  current_ = static_cast<int>(scopes_.size()) - 1;
}

std::size_t ActivationArena::reserve(RowBytes bytes, Lifetime life) {
  DPT_REQUIRE(!allocated_, ExitCode::kOther, "activation arena: reservations after allocation");
  if (current_ >= 0 && life == Lifetime::kSaved) scopes_[std::size_t(current_)].has_saved = true;
  slots_.push_back({std::move(bytes), life, current_});
  return slots_.size() - 1;
}

bool ActivationArena::recomputed(const Scope& s, bool recompute) const {
  return recompute && s.needs_backward && s.may_recompute && s.has_saved;
}

bool ActivationArena::recomputes(std::size_t layer, bool recompute) const {
  for (const Scope& s : scopes_)
    if (s.layer == layer) return recomputed(s, recompute);
  return false;
}

std::pair<std::vector<std::size_t>, ActivationArena::Bytes> ActivationArena::layout(
    int rows, bool recompute) const {
  std::vector<std::size_t> offsets(slots_.size(), 0);
  std::size_t end = 0, saved = 0;
  // Whether a slot lives in the shared region.
  auto shared = [&](const Slot& slot) {
    if (slot.scope < 0) return false;
    const Scope& s = scopes_[std::size_t(slot.scope)];
    return slot.life == Lifetime::kPass || !s.needs_backward || recomputed(s, recompute);
  };
  for (std::size_t i = 0; i < slots_.size(); ++i)  // the model's, then kept saved buffers
    if (!shared(slots_[i])) {
      offsets[i] = end;
      const std::size_t n = aligned(slots_[i].bytes(rows));
      end += n;
      if (slots_[i].life == Lifetime::kSaved) saved += n;
    }
  const std::size_t region = end;
  std::vector<std::size_t> scope_end(scopes_.size(), region), scope_saved(scopes_.size(), 0);
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (shared(slots_[i])) {
      const auto s = std::size_t(slots_[i].scope);
      offsets[i] = scope_end[s];
      const std::size_t n = aligned(slots_[i].bytes(rows));
      scope_end[s] += n;
      if (slots_[i].life == Lifetime::kSaved && recomputed(scopes_[s], recompute)) scope_saved[s] += n;
    }
  for (std::size_t e : scope_end) end = std::max(end, e);
  // One recomputed layer's saved buffers are alive at a time.
  saved += scope_saved.empty() ? 0 : *std::max_element(scope_saved.begin(), scope_saved.end());
  return {std::move(offsets), Bytes{end, saved}};
}

ActivationArena::Bytes ActivationArena::bytes(int rows, bool recompute) const {
  return layout(rows, recompute).second;
}

void ActivationArena::allocate(Backend& be, int rows, bool recompute) {
  DPT_REQUIRE(!allocated_, ExitCode::kOther, "activation arena: allocated twice");
  auto [offsets, end] = layout(rows, recompute);
  offsets_ = std::move(offsets);
  memory_ = DeviceBuffer<std::byte>(be, end.total);
  allocated_ = true;
}

void* ActivationArena::address(std::size_t slot) const {
  DPT_REQUIRE(allocated_ && slot < offsets_.size(), ExitCode::kOther,
              "activation arena: a buffer used before the model allocated it");
  return memory_.get() + offsets_[slot];
}

}  // namespace dptrain
