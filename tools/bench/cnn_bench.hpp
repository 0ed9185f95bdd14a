// Implements: the pieces of dptrain_cnn_bench (the CNN rows of
// tools/bench/bench.py beside the end-to-end runs): its arguments and the
// row sets of cnn_bench.cpp (bn collectives) and conv_rows.cpp (conv
// layers against bare oneDNN).
#pragma once

#include <string>
#include <vector>

#include "bench_rows.hpp"

#include "dptrain/model/tensor.hpp"

namespace dptrain::bench {

struct CnnArgs {
  std::string what;   // conv, bn or all
  std::string model;  // a --model spec
  Shape input{1, 28, 28};
  int batch = 128;    // global batch (the conv rows run it on one rank)
  int threads = 1;
  int repeats = 0;    // 0: sized from the warm-up to each row's time budget
};

// Rank 0 alone; the caller's other ranks wait.
std::vector<Row> conv_rows(const CnnArgs& args);

}  // namespace dptrain::bench
