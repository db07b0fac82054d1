// Command line of `launch` (CLI11), compatible with paddle.distributed.launch where paddle has
// the option. Pure: argv in, Options out; no file system or process access.
#pragma once

#include <optional>
#include <string>

#include "launcher/options.h"

namespace launch {

struct CliResult {
  std::optional<Options> options;  // empty: --help was asked, print `help` and exit 0
  std::string help;
};

// Throws UsageError with a one-line message on any bad option.
CliResult parse_cli(int argc, const char* const* argv);

}  // namespace launch
