// Implements: the command line of docs/design.md section 2
// (Boost.ProgramOptions): commands, options, --config INI files with the
// command line winning, and --help per command.
#pragma once

#include "dptrain/run/options.hpp"

namespace dptrain {

// Parses argv (argv[1] is the command). Throws Error(ExitCode::kUsage) with a
// message naming the bad option. Identical on every rank, so ranks agree on
// usage errors without communicating.
Options parse_options(int argc, const char* const* argv);

const char* command_name(Command c);

}  // namespace dptrain
