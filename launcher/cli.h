// Command line of `launch` (CLI11): our options, and paddle.distributed.launch's and torchrun's
// spellings mapped onto them (docs/launch.md: "torchrun's and paddle's spellings"). Environment variables
// apply as those tools apply them: torchrun's PET_<OPTION> fills an option not given on the
// command line; paddle's PADDLE_NNODES, PADDLE_MASTER, ... override the command line, with a
// warning. Pure: argv and the environment in, Options out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "proto/worker_env.h"

namespace launch {

struct CliResult {
  std::optional<Options> options;  // empty: --help or --version was asked, print `text`, exit 0
  std::string text;
  std::vector<std::string> warnings;  // e.g. which PADDLE_* variable overrode which option
  std::vector<std::string> infos;     // e.g. a torchrun option that has no effect here
  std::vector<std::string> debug;     // e.g. why the PADDLE_* variables did not apply
};

// Throws UsageError with a one-line message on any bad option.
CliResult parse_cli(int argc, const char* const* argv, const proto::EnvMap& env = {});

}  // namespace launch
