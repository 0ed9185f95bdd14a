// Implements: the checkpoint directory logic of checkpoint.hpp behind
// --checkpoint-dir, --keep-checkpoints and --resume auto: names, listing
// newest first, picking the newest valid one, pruning.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"

namespace dptrain {
namespace {

bool step_name(const std::string& name, const char* suffix, std::string* digits) {
  const std::string sfx(suffix);
  if (name.size() <= 5 + sfx.size() || name.rfind("ckpt-", 0) != 0 ||
      name.compare(name.size() - sfx.size(), sfx.size(), sfx) != 0)
    return false;
  std::string d = name.substr(5, name.size() - 5 - sfx.size());
  if (d.find_first_not_of("0123456789") != std::string::npos) return false;
  if (digits) *digits = d;
  return true;
}

void remove_file(const std::string& p) {
  std::error_code ec;
  std::filesystem::remove(p, ec);
  if (ec) std::fprintf(stderr, "dptrain: warning: cannot remove %s: %s\n", p.c_str(), ec.message().c_str());
}

}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "ckpt-%09lld.h5", static_cast<long long>(step));
  return dir.empty() ? name : (std::filesystem::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> found;  // (digits, path)
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string digits;
    if (!e.is_regular_file(ec) || !step_name(e.path().filename().string(), ".h5", &digits))
      continue;
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
    found.emplace_back(digits, e.path().string());
  }
  // Numeric order without parsing: fewer digits is smaller, then lexical.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string find_resume_checkpoint(const std::string& dir) {
  for (const auto& p : list_checkpoints(dir)) {
    try {
      verify_checkpoint(p);
      return p;
    } catch (const Error& e) {
      std::fprintf(stderr, "dptrain: warning: skipping checkpoint %s: %s\n", p.c_str(), e.what());
      std::fflush(stderr);
    }
  }
  return "";
}

void prune_checkpoints(const std::string& dir, int keep) {
  const auto all = list_checkpoints(dir);
  for (std::size_t i = keep > 0 ? std::size_t(keep) : all.size(); i < all.size(); ++i)
    remove_file(all[i]);
  // Called right after a checkpoint was renamed into place, so any .tmp left
  // is from a crashed earlier write.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (step_name(e.path().filename().string(), ".h5.tmp", nullptr)) remove_file(e.path().string());
}
}  // namespace dptrain
