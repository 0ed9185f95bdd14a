// Implements: the scans of Dataset::validate() (internal to src/data/):
// every stored row of one file of a set, in passes of a bounded size, for
// non-finite features and targets and for class or token ids out of range.
// The first bad row of the file names itself (file, dataset, index).
#pragma once

#include <cstdint>

#include "dptrain/data/dataset.hpp"
#include "dptrain/data/dataset_files.hpp"

namespace dptrain {

// A features/labels part: returns its largest class id (-1 for targets).
// num_classes > 0 bounds the ids to [0, num_classes).
std::int64_t validate_part(const SetPart& m, const SetInfo& info, std::int64_t num_classes);

// A token part: every id in [0, vocab_size); returns the largest.
std::int64_t validate_token_part(const SetPart& m, const SetInfo& info);

}  // namespace dptrain
