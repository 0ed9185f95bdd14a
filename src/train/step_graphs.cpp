// Implements: the step's graphs (see step_graphs.hpp).
#include "train/step_graphs.hpp"

#include <utility>

namespace dptrain {

bool StepGraphs::run(const StepGraphKey& key, const std::function<void()>& pass) {
  if (!active()) return false;
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) return false;
    // The first step of a key: as usual, remembered while fewer than
    // kMaxSeen are (a key first seen after that is never recorded).
    if (!seen_.count(key)) {
      if (seen_.size() < kMaxSeen) seen_.insert(key);
      return false;
    }
    std::string why;
    std::unique_ptr<Backend::RecordedWork> graph = be_.record(pass, &why);
    if (!graph) {
      failure_ = why.empty() ? std::string("the backend recorded nothing") : why;
      return false;
    }
    it = graphs_.emplace(key, std::move(graph)).first;
  }
  it->second->replay();
  ++replays_;
  return true;
}

std::string StepGraphs::take_failure() {
  if (failure_taken_) return {};
  failure_taken_ = !failure_.empty();
  return failure_;
}

}  // namespace dptrain
