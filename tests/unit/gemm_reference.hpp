// Implements: the naive double-precision GEMM the CPU GEMM tests compare
// against, with the rounding bound a float GEMM must stay within.
#pragma once

#include <cmath>
#include <vector>

namespace dptrain {

// Naive row-major reference in double; a stored [rows, cols] with op(A)[i][p].
// bound (when given) receives, per element of C, the most a float GEMM may
// differ from it: every float result is within gamma_{k+2} of the exact one
// relative to |alpha| sum |a b| + |beta c| (k products, the alpha and beta
// scalings), gamma_n = n u / (1 - n u), u = 2^-24, whatever the order of the
// sum (any BLAS kernel); plus the reference's own rounding to float.
inline void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<float>& a,
                int lda, const std::vector<float>& b, int ldb, float beta, std::vector<float>& c,
                int ldc, std::vector<double>* bound = nullptr) {
  constexpr double u = 0x1p-24;
  const double gamma = (k + 2) * u / (1 - (k + 2) * u);
  if (bound) bound->assign(c.size(), 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0.0, abs_acc = 0.0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[p * lda + i] : a[i * lda + p];
        const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += static_cast<double>(av) * bv;
        abs_acc += std::abs(static_cast<double>(av) * bv);
      }
      const double exact = alpha * acc + beta * c[i * ldc + j];
      if (bound)
        (*bound)[i * ldc + j] =
            gamma * (std::abs(alpha) * abs_acc + std::abs(beta * c[i * ldc + j])) + u * std::abs(exact);
      c[i * ldc + j] = static_cast<float>(exact);
    }
}

}  // namespace dptrain
