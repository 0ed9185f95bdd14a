// Implements: scratch directories for tests (removed at exit) and the paths
// ctest passes in (the dptrain binary, the source tree).
#pragma once

#include <string>

namespace dptrain::testing {

// A fresh directory under the system temp dir, unique per process.
std::string scratch_dir(const std::string& tag);
// $DPTRAIN_SOURCE_DIR (set by ctest), or "." when unset.
std::string source_dir();

}  // namespace dptrain::testing
