// Implements: what one rank holds in device memory for training, with and
// without --shard-optimizer: the start-up summary's memory line and
// `inspect --ranks P` (docs/design.md section 2; docs/scaling.md plans a
// large job with the same arithmetic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dptrain {

struct RankMemory {
  int ranks = 1;
  bool state_sliced = false;     // --shard-optimizer: the state kept in 1/P slices
  bool params_sliced = false;    // --shard-params: parameters and gradients in 1/P slices too
  bool bf16_gathers = false;     // --shard-params under bf16: units gathered as bf16 copies
  std::uint64_t params_whole = 0;  // the whole parameter arena
  std::uint64_t unit_buffers = 0;  // --shard-params: two gathered units, two units' gradients
                                   // (and, gathering bf16, their two packed twins)
  std::uint64_t params = 0;        // fp32 parameters, every rank all of them
  std::uint64_t params_bf16 = 0;   // their bf16 twin (Model::params_bf16_bytes), set by the caller
  std::uint64_t grads = 0;         // fp32 gradient arena
  std::uint64_t accumulation = 0;  // --accumulate K > 1: the earlier micro-batches' sum
  std::uint64_t state = 0;         // optimizer state this rank keeps (its slice when sliced)
  std::uint64_t state_whole = 0;   // the same kept whole
  std::uint64_t state_slice = 0;   // the same in slices over `ranks`
  std::uint64_t activations = 0;   // layer outputs, gradient buffers, layer workspaces
  std::uint64_t largest_activation = 0;
  int activation_rows = 0;         // the rows they are sized for (0: not known)
  bool recompute = false;          // activations planned for --recompute blocks
  std::uint64_t kept = 0;          // of the activations, those kept from forward for backward
  std::uint64_t kept_other = 0;    // the same the other way (with / without recomputation)
  std::uint64_t total() const {
    return params + params_bf16 + grads + accumulation + state + unit_buffers + activations;
  }
};

// The bytes of a model of num_params floats whose optimizer keeps
// state_arrays arrays of the arena's size (0 plain SGD, 1 momentum, 2 Adam),
// trained by `ranks` ranks, the state sliced or not: rank 0 holds the largest slice
// (slice_bounds). Activations are left 0 for the caller to fill in.
// params_sliced (--shard-params, which slices the state too): parameters and
// gradients kept in slices, plus four buffers of largest_unit floats, and
// with bf16_gathers (--precision bf16) two packed bf16 twins of a unit.
RankMemory rank_memory(std::uint64_t num_params, int state_arrays, int ranks, bool state_sliced,
                       bool accumulates, bool params_sliced = false,
                       std::uint64_t largest_unit = 0, bool bf16_gathers = false);

// "1.5 MiB": three significant digits in B, KiB, MiB, GiB or TiB.
std::string human_bytes(std::uint64_t bytes);

// One line: "parameters 1.03 MiB, gradients 1.03 MiB, optimizer state
// 0.514 MiB (slice 1/4 of 2.05 MiB), activations ..., total ...".
std::string describe(const RankMemory& m);

}  // namespace dptrain
