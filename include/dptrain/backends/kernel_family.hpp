// Implements: what every kernel family of a Backend shares (docs/design.md
// section 1): the KernelFamily base its interface derives from, the dense
// index a family type gets the first time it is asked for, and the
// KernelRegistry a backend implementation owns — one table per family,
// registered once when the backend is made, found by type in O(1)
// (Backend::kernels<Family>()).
// Plain C++17: the CUDA sources (*.cu) see the family headers too.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

namespace dptrain {

// The base of a family's interface (dptrain/backends/kernels/). A family
// names itself for error messages:
//   static constexpr const char* kName = "norm";
// and may say what a backend without it lacks (after "the <backend> backend
// has no "; the default is "<kName> kernels"):
//   static constexpr const char* kMissing = "kernels for ...";
class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  KernelFamily(const KernelFamily&) = delete;
  KernelFamily& operator=(const KernelFamily&) = delete;

 protected:
  KernelFamily() = default;
};

namespace kernel_family_detail {
// 0, 1, 2, ... in the order families are first asked for, process-wide.
std::size_t next_index() noexcept;
}  // namespace kernel_family_detail

// The dense index of Family, the same in every translation unit.
template <typename Family>
std::size_t kernel_family_index() {
  static_assert(std::is_base_of_v<KernelFamily, Family>,
                "a kernel family's interface derives from KernelFamily");
  static const std::size_t index = kernel_family_detail::next_index();
  return index;
}

// The families of one backend, one table each. The backend implementation
// owns it as a member declared after the streams and handles the tables
// launch on, so that the tables are destroyed first; among themselves they
// are destroyed in the reverse order of registration.
class KernelRegistry {
 public:
  KernelRegistry() = default;
  KernelRegistry(const KernelRegistry&) = delete;
  KernelRegistry& operator=(const KernelRegistry&) = delete;
  ~KernelRegistry() { clear(); }

  // Registers table as the backend's Family. A second table of one family
  // is a programming error (Error(kOther)).
  template <typename Family>
  void add(std::unique_ptr<Family> table) {
    insert(kernel_family_index<Family>(), std::move(table), Family::kName);
  }

  // The table of Family, or null where the backend has none.
  template <typename Family>
  Family* find() const noexcept {
    const std::size_t index = kernel_family_index<Family>();
    if (index >= tables_.size()) return nullptr;
    return static_cast<Family*>(tables_[index].get());
  }

  // Destroys every table, the last registered first.
  void clear() noexcept;

 private:
  void insert(std::size_t index, std::unique_ptr<KernelFamily> table, const char* name);

  std::vector<std::unique_ptr<KernelFamily>> tables_;  // by family index
  std::vector<std::size_t> registered_;                // indices, in order of add
};

}  // namespace dptrain
