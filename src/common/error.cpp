// Implements: throw_error, the one place errors get their file:line, and
// throw_bad_choice.
#include "dptrain/common/error.hpp"

#include <string>

namespace dptrain {

[[noreturn]] void throw_error(ExitCode code, const std::string& what, const char* file, int line) {
  std::string f(file);
  auto slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  throw Error(code, what, f + ":" + std::to_string(line));
}

[[noreturn]] void throw_bad_choice(const char* option, const std::string& value,
                                   const char* choices) {
  throw Error(ExitCode::kUsage,
              std::string("--") + option + " '" + value + "' is not one of: " + choices);
}

}  // namespace dptrain
