// Implements: the CPU backend's vector building blocks (internal to
// src/backends/cpu/): exp_approx, one branch-free e^x per float, and the
// fixed-lane row reductions (sum, pair of sums, maximum). Inlined into the
// DPT_VECTOR_CLONES loops (vector_clones.hpp), they vectorize; their results
// depend only on the values and the row length: the same bits for any thread
// count and on AVX-512, AVX2 or SSE2.
#pragma once

#include <bit>
#include <cstdint>

// Inlined always, also into the DPT_VECTOR_CLONES loops, which compile
// them for their own instruction set.
#define DPT_INLINE [[gnu::always_inline]] inline

namespace dptrain::cpu_vec {

// e^x to 1.03e-7 relative (1.22 ulp; measured over every float in
// [−87, 88]), clamped where e^x over- or underflows (e^−∞ gives e^−87, not
// 0): 2^n · p(r), r = x − n·ln2 in [−ln2/2, ln2/2], p Taylor's polynomial of
// degree 7 (its remainder is below 5e-9 there). A NaN stays NaN. Branch-free,
// so the loops that call it vectorize.
DPT_INLINE float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;  // comparisons with NaN are false: NaN passes
  x = x > 88.0f ? 88.0f : x;
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float whole = n == n ? n : 0.0f;  // NaN has no integer; p is NaN then
  const std::int32_t bits = (static_cast<std::int32_t>(whole) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// Accumulators per reduction, fixed here and not by the machine's vector
// width: lane l adds the terms l, l + 16, l + 32, ... of a row's whole
// blocks of 16 in order, one more accumulator the last n % 16 terms in
// order, and the lanes combine in one fixed tree, the tail's last. 16
// doubles are two AVX-512 registers, four AVX2 ones or eight SSE2 ones:
// enough independent chains to hide the adder's latency. (No lane is
// indexed by a variable, so the lanes stay in registers.)
constexpr int kLanes = 16;

// Halving strides, each level a vector add of the lanes' upper half onto
// the lower: (((v0 + v8) + (v4 + v12)) + ((v2 + v10) + (v6 + v14))) + (the
// same from v1).
template <typename T>
DPT_INLINE T lane_tree(T* v) {
  for (int half = kLanes / 2; half > 0; half /= 2)
    for (int l = 0; l < half; ++l) v[l] = v[l] + v[l + half];
  return v[0];
}

// Σ term(i) over i < n in double, in the lane order above.
template <typename Term>
DPT_INLINE double lane_sum(int n, Term term) {
  double acc[kLanes] = {}, tail = 0.0;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  for (; i < n; ++i) tail += term(i);
  return lane_tree(acc) + tail;
}

// Two sums in one pass: term(i, a, b) adds its two terms to a and b (the
// accumulators of i's lane).
template <typename Term>
DPT_INLINE void lane_sum2(int n, Term term, double& sum_a, double& sum_b) {
  double a[kLanes] = {}, b[kLanes] = {}, tail_a = 0.0, tail_b = 0.0;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) term(i + l, a[l], b[l]);
  for (; i < n; ++i) term(i, tail_a, tail_b);
  sum_a = lane_tree(a) + tail_a;
  sum_b = lane_tree(b) + tail_b;
}

// The larger of m and v, `v > m ? v : m`: a NaN v never wins, a NaN m stays.
DPT_INLINE float larger(float m, float v) { return v > m ? v : m; }

// max(first, v[0], ..., v[n − 1]) in the lanes above, as a scan from
// `first` finds it (no NaN in v wins; a NaN `first` stays). Exact, so the
// lane order changes no bits but those of a zero's sign.
DPT_INLINE float lane_max(const float* v, int n, float first) {
  float acc[kLanes], tail = first;
  for (int l = 0; l < kLanes; ++l) acc[l] = first;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = larger(acc[l], v[i + l]);
  for (; i < n; ++i) tail = larger(tail, v[i]);
  for (int half = kLanes / 2; half > 0; half /= 2)
    for (int l = 0; l < half; ++l) acc[l] = larger(acc[l], acc[l + half]);
  return larger(acc[0], tail);
}

}  // namespace dptrain::cpu_vec
