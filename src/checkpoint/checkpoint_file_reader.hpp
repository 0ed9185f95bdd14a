// Implements: the file-level checks of reading a checkpoint (docs/design.md
// section 4) that checkpoint_read.cpp builds its reader on: an object's
// checksummed metadata loaded before anything is asked of it, attribute
// sizes, a float dataset's dtype, rank and shape, finite values, and whole
// arenas of tensors against a layout. Every failure is one
// Error(kCheckpoint) naming the file (ckpt::fail).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.hpp"
#include "dptrain/model/layer.hpp"

namespace dptrain::ckpt {

struct FileReader {
  hid_t file;
  const std::string& path;
  // Where the expected tensor shapes come from, for mismatch messages.
  std::string layout_source = "/model";

  [[noreturn]] void bad(const std::string& what) const { fail(path, what); }

  // h5::exists and h5::has_attr read "cannot read" as "absent". Loading an
  // object's header, attributes and links (all checksummed in our files)
  // before asking about them makes damage say so, not "missing".
  void probe(const std::string& name) const;

  // A string attribute, refused when its stored size is absurd: the reader
  // would allocate whatever size a damaged type declares.
  std::string attr_string(hid_t obj, const std::string& where, const char* name) const;

  // Shape of a float dataset that must exist; checks dtype and rank only
  // (rank 0: any rank from 1 to kMaxTensorRank).
  std::vector<hsize_t> float_shape(const std::string& name, std::size_t rank) const;

  // Reads name (already shape-checked) into dst and checks every value.
  void read_floats(const std::string& name, float* dst, std::size_t count,
                   std::size_t row_len) const;

  // One arena from <base>/<layer>/<name> for each tensor of layout, whose
  // shapes (read from /model) every array must have.
  std::vector<float> arena(const std::string& base, const std::vector<ParamInfo>& layout) const;

  // <base>/<t.layer>/<t.name> (already shape-checked) into dst, checked.
  void read_tensor(const std::string& base, const ParamInfo& t, float* dst) const;

  // Every tensor of layout exists under base with the layout's shape.
  void check_arena(const std::string& base, const std::vector<ParamInfo>& layout) const;
};

}  // namespace dptrain::ckpt
