// Implements: the registry of host memory blocks that the CUDA host
// emulation treats as device memory or as pinned memory (the caller locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace dptrain_emu {

class AddressRanges {
 public:
  void add(const void* p, std::size_t bytes) {
    blocks_[address(p)] = bytes;
    total_ += bytes;
  }
  void remove(const void* p) {
    auto it = blocks_.find(address(p));
    if (it == blocks_.end()) return;
    total_ -= it->second;
    blocks_.erase(it);
  }
  std::size_t total() const { return total_; }  // bytes in all blocks
  // Whether p lies in a block; one past its end counts when end_counts
  // (a pointer argument may be the end of a buffer).
  bool contains(const void* p, bool end_counts) const {
    const std::uintptr_t a = address(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return end_counts ? a <= it->first + it->second : a < it->first + it->second;
  }
  // Whether [p, p + bytes) lies inside one block.
  bool contains_range(const void* p, std::size_t bytes) const {
    const std::uintptr_t a = address(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  std::map<std::uintptr_t, std::size_t> blocks_;
  std::size_t total_ = 0;
};

}  // namespace dptrain_emu
