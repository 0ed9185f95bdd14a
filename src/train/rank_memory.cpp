// Implements: the memory a rank holds (see rank_memory.hpp).
#include "dptrain/train/rank_memory.hpp"

#include <cstdio>

namespace dptrain {

RankMemory rank_memory(std::uint64_t num_params, int state_arrays, int ranks, bool state_sliced,
                       bool accumulates, bool params_sliced, std::uint64_t largest_unit,
                       bool bf16_gathers) {
  RankMemory m;
  m.ranks = ranks;
  state_sliced = state_sliced || params_sliced;
  m.state_sliced = state_sliced;
  m.params_sliced = params_sliced;
  const std::uint64_t floats = sizeof(float);
  m.params = m.grads = m.params_whole = num_params * floats;
  if (accumulates) m.accumulation = num_params * floats;
  m.state_whole = static_cast<std::uint64_t>(state_arrays) * num_params * floats;
  const auto p = static_cast<std::uint64_t>(ranks > 0 ? ranks : 1);
  m.state_slice = static_cast<std::uint64_t>(state_arrays) * ((num_params + p - 1) / p) * floats;
  m.state = state_sliced ? m.state_slice : m.state_whole;
  if (params_sliced) {
    m.params = m.grads = ((num_params + p - 1) / p) * floats;  // rank 0's, the largest
    m.unit_buffers = 4 * largest_unit * floats;
    // Each piece padded to whole floats: at most (unit + P) / 2 floats a twin.
    if (bf16_gathers) m.unit_buffers += 2 * ((largest_unit + p + 1) / 2) * floats;
    m.bf16_gathers = bf16_gathers;
  }
  return m;
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char text[32];
  if (u == 0) std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(text, sizeof text, "%.3g %s", v, units[u]);
  return text;
}

std::string describe(const RankMemory& m) {
  std::string s = "parameters " + human_bytes(m.params);
  if (m.params_bf16) s += " (+" + human_bytes(m.params_bf16) + " bf16 copy)";
  s += ", gradients " + human_bytes(m.grads);
  if (m.params_sliced)
    s += " (slices 1/" + std::to_string(m.ranks) + " of " + human_bytes(m.params_whole) +
         "; unit buffers " + human_bytes(m.unit_buffers) +
         (m.bf16_gathers ? ", gathered in bf16" : "") + ")";
  if (m.accumulation) s += " (+" + human_bytes(m.accumulation) + " accumulation)";
  s += ", optimizer state " + human_bytes(m.state);
  if (m.state_sliced && m.ranks > 1)
    s += " (slice 1/" + std::to_string(m.ranks) + " of " + human_bytes(m.state_whole) + ")";
  else if (m.ranks > 1 && m.state_whole)
    s += " (" + human_bytes(m.state_slice) + " with --shard-optimizer)";
  if (m.activation_rows > 0)
    s += ", activations " + human_bytes(m.activations) + " for " + std::to_string(m.activation_rows) +
         " rows (" + human_bytes(m.kept) + " kept for backward, " + human_bytes(m.kept_other) +
         (m.recompute ? " without recomputation" : " with --recompute blocks") +
         "; largest buffer " + human_bytes(m.largest_activation) + ")";
  return s + "; total " + human_bytes(m.total());
}

}  // namespace dptrain
