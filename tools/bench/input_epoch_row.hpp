// Implements: the input row of dptrain_bench (input_epoch_row.cpp): one
// epoch of the input pipeline (rank 0's Dataset and InputQueue, the
// blocking Scatter to every rank) against a raw H5Dread of the whole set.
#pragma once

#include <string>

#include "bench_rows.hpp"
#include "dptrain/run/mpi_session.hpp"

namespace dptrain::bench {

// On every rank of mpi, over /train of data_file, with `threads` compute
// threads per rank; run's repeats and warmup (its rows are not used: the
// batch is 128).
Row input_epoch_row(const MpiSession& mpi, const std::string& data_file, int threads,
                    const RowRun& run);

}  // namespace dptrain::bench
