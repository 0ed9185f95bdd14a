// Implements: checks of the kernel registry (dptrain/backends/kernel_family.hpp):
// a table is found by its family's type, an absent family is null, a
// second table of one family is refused, tables are destroyed last
// registered first; and Backend::kernels on the CPU backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/backends/kernel_family.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/backends/kernels/sequence_kernels.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

// Two families of this test only; each table records its destruction.
class FirstFamily : public KernelFamily {
 public:
  static constexpr const char* kName = "first";
  explicit FirstFamily(std::vector<std::string>* log) : log_(log) {}
  ~FirstFamily() override { log_->push_back(kName); }

 private:
  std::vector<std::string>* log_;
};

class SecondFamily : public KernelFamily {
 public:
  static constexpr const char* kName = "second";
  explicit SecondFamily(std::vector<std::string>* log) : log_(log) {}
  ~SecondFamily() override { log_->push_back(kName); }

 private:
  std::vector<std::string>* log_;
};

TEST(KernelRegistry, FindsEachTableByItsFamily) {
  std::vector<std::string> log;
  KernelRegistry registry;
  EXPECT_EQ(registry.find<FirstFamily>(), nullptr);
  auto first = std::make_unique<FirstFamily>(&log);
  FirstFamily* first_ptr = first.get();
  registry.add(std::move(first));
  EXPECT_EQ(registry.find<FirstFamily>(), first_ptr);
  EXPECT_EQ(registry.find<SecondFamily>(), nullptr);
  EXPECT_NE(kernel_family_index<FirstFamily>(), kernel_family_index<SecondFamily>());
}

TEST(KernelRegistry, RefusesASecondTableOfOneFamily) {
  std::vector<std::string> log;
  KernelRegistry registry;
  registry.add(std::make_unique<FirstFamily>(&log));
  EXPECT_THROW(registry.add(std::make_unique<FirstFamily>(&log)), Error);
}

TEST(KernelRegistry, DestroysTheLastRegisteredFirst) {
  std::vector<std::string> log;
  {
    KernelRegistry registry;
    registry.add(std::make_unique<SecondFamily>(&log));
    registry.add(std::make_unique<FirstFamily>(&log));
  }
  EXPECT_EQ(log, (std::vector<std::string>{"first", "second"}));
}

TEST(KernelRegistry, CpuBackendHasEveryFamilyAndNamesAMissingOne) {
  auto be = make_backend("cpu", {});
  DenseKernels& dense = be->kernels<DenseKernels>();
  EXPECT_EQ(&dense, &be->kernels<DenseKernels>());  // one table, asked twice
  EXPECT_NO_THROW(be->kernels<SequenceKernels>());
  try {
    be->kernels<FirstFamily>();
    FAIL() << "a family the backend never registered was found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()), "the cpu backend has no first kernels");
  }
}

}  // namespace
}  // namespace dptrain
