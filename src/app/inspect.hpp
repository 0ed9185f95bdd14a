// Implements: the printing half of `dptrain inspect`, apart from MPI so unit
// tests can call it on one process and read what it prints.
#pragma once

#include <ostream>
#include <string>

namespace dptrain {

// Prints a summary of a checkpoint or a data file to out. Throws
// Error(kCheckpoint) for a bad checkpoint, Error(kData) for a bad data file
// or a file that is neither. ranks > 0: for a checkpoint, also what each of
// that many ranks would hold to train it, with and without --shard-optimizer.
void inspect_file(const std::string& path, std::ostream& out, int ranks = 0);

}  // namespace dptrain
