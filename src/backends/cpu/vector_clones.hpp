// Implements: DPT_VECTOR_CLONES, the function multiversioning of the CPU
// backend's hot loops (internal to src/backends/cpu/).
#pragma once

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64, and
// the best one the CPU has is picked when the program loads (GCC function
// multiversioning), so one portable binary runs at the speed of the node.
// Every clone computes bitwise the same: no FMA contraction (-ffp-contract=off),
// and these loops add elementwise, or in the fixed lanes of vector_math.hpp,
// never re-associating a sum.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DPT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DPT_VECTOR_CLONES
#endif
