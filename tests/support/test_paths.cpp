// Implements: scratch directories for tests (see test_paths.hpp).
#include "test_paths.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace dptrain::testing {
namespace {

struct Cleanup {
  std::vector<std::string> dirs;
  ~Cleanup() {
    std::error_code ec;
    for (auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
Cleanup& cleanup() {
  static Cleanup c;
  return c;
}

}  // namespace

std::string scratch_dir(const std::string& tag) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("dptrain-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  cleanup().dirs.push_back(dir.string());
  return dir.string();
}

std::string source_dir() {
  const char* s = std::getenv("DPTRAIN_SOURCE_DIR");
  return s ? s : ".";
}

}  // namespace dptrain::testing
