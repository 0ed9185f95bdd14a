// Implements: unit tests of sets spread over many files (docs/design.md section
// 3): a `.txt` list concatenates its files' sets in order, with paths
// relative to the list; reads that span files return the right rows while
// at most PartPool::kMaxOpen files are open; validation and every bad list
// (empty, a missing file, another layout) name the file, with exit code 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "dptrain/common/h5.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/dataset_files.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using testing::FixtureSpec;

void expect_data_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one with '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData) << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

class DataFilesTest : public ::testing::Test {
 protected:
  // Writes parts/p<i>.h5 with rows[i] rows each and list.txt naming them.
  std::string write_parts(const std::vector<std::uint64_t>& rows, FixtureSpec spec = {}) {
    std::filesystem::create_directories(dir_ + "/parts");
    std::ofstream list(dir_ + "/list.txt");
    list << "# parts of one set\n\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::string name = "parts/p" + std::to_string(i) + ".h5";
      std::filesystem::remove(dir_ + "/" + name);
      spec.rows = rows[i];
      testing::write_fixture(dir_ + "/" + name, spec);
      list << "  " << name << "\n";
    }
    return dir_ + "/list.txt";
  }
  std::string dir_ = testing::scratch_dir("datafiles");
};

int open_hdf5_files() { return static_cast<int>(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE)); }

TEST_F(DataFilesTest, AListConcatenatesItsFilesInOrderWithFewOpen) {
  std::vector<std::uint64_t> rows;
  for (std::uint64_t i = 0; i < 20; ++i) rows.push_back(3 + i % 5);
  const std::string list = write_parts(rows, {.shape = {2, 3}, .chunk_rows = 2});
  Dataset data(list, "train");
  std::uint64_t total = 0;
  for (auto r : rows) total += r;
  EXPECT_EQ(data.info().rows, total);
  EXPECT_EQ(data.info().dim, 6u);
  EXPECT_EQ(data.info().file, list);
  EXPECT_LE(open_hdf5_files(), int(PartPool::kMaxOpen));
  std::int32_t max_label = 0;  // over the rows of every file (each starts at fixture row 0)
  for (auto r : rows)
    for (std::uint64_t i = 0; i < r; ++i) max_label = std::max(max_label, testing::fixture_label(i, 10));
  EXPECT_EQ(data.validate(10), max_label);
  // Runs that start anywhere and span several files, in a scattered order.
  std::vector<float> f;
  std::vector<std::int32_t> l;
  for (std::uint64_t k = 0; k < total; ++k) {
    const std::uint64_t begin_at = (k * 53) % total;  // 53 and total are coprime: every start
    const std::uint64_t count = std::min<std::uint64_t>(13, total - begin_at);
    f.assign(count * 6, -1.0f);
    l.assign(count, -1);
    data.read_rows(begin_at, count, f.data(), l.data());
    ASSERT_LE(open_hdf5_files(), int(PartPool::kMaxOpen));
    for (std::uint64_t r = 0; r < count; ++r) {
      std::uint64_t row = begin_at + r, part = 0;
      while (row >= rows[part]) row -= rows[part++];  // the row within its file
      ASSERT_EQ(l[r], testing::fixture_label(row, 10)) << "row " << begin_at + r;
      for (std::uint64_t j = 0; j < 6; ++j) ASSERT_EQ(f[r * 6 + j], testing::fixture_value(row, j));
    }
  }
}

TEST_F(DataFilesTest, ValidationNamesTheFileAndItsOwnIndex) {
  const std::string list = write_parts({5, 6, 7}, {.shape = {4}});
  // A NaN at row 2 of the third file (row 13 of the set).
  h5::File f = h5::open_read_write(dir_ + "/parts/p2.h5", ExitCode::kOther);
  h5::DataSet d = h5::open_dataset(f.get(), "/train/features", ExitCode::kOther);
  std::vector<float> row(4, std::numeric_limits<float>::quiet_NaN());
  h5::write_rows(d.get(), H5T_NATIVE_FLOAT, 2, 1, row.data(), ExitCode::kOther);
  d.reset();
  f.reset();
  Dataset data(list, "train");
  expect_data_error([&] { data.validate(10); }, {"parts/p2.h5: /train/features", "NaN at index 2"});
}

TEST_F(DataFilesTest, BadListsNameTheFile) {
  std::ofstream(dir_ + "/empty.txt") << "# nothing here\n\n";
  expect_data_error([&] { Dataset(dir_ + "/empty.txt", "train"); }, {"empty.txt", "lists no data files"});
  expect_data_error([&] { Dataset(dir_ + "/absent.txt", "train"); }, {"absent.txt", "no such file"});

  std::string list = write_parts({5, 6});
  std::ofstream(list, std::ios::app) << "parts/missing.h5\n";
  expect_data_error([&] { Dataset(list, "train"); }, {"parts/missing.h5", "no such file"});

  struct Other {
    FixtureSpec spec;
    const char* says;
  };
  for (const Other& o : {Other{{.shape = {3, 5}}, "[N, 3, 5]"}, Other{{.uint8 = true}, "uint8"},
                         Other{{.targets = 2}, "2 float32 targets"}}) {
    list = write_parts({5, 6});
    FixtureSpec spec = o.spec;
    spec.rows = 4;
    std::filesystem::remove(dir_ + "/parts/odd.h5");
    testing::write_fixture(dir_ + "/parts/odd.h5", spec);
    std::ofstream(list, std::ios::app) << "parts/odd.h5\n";
    expect_data_error([&] { Dataset(list, "train"); },
                      {"parts/odd.h5", o.says, "every listed file must hold the same layout"});
  }
}

TEST_F(DataFilesTest, ListedPathsAreRelativeToTheList) {
  const std::string list = write_parts({4, 4});
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");
  EXPECT_NO_THROW(Dataset(list, "train"));
  std::filesystem::current_path(cwd);
  const auto files = read_file_list(list);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1], dir_ + "/parts/p1.h5");
  EXPECT_EQ(list_sets(list), std::vector<std::string>{"train"});
}

}  // namespace
}  // namespace dptrain
