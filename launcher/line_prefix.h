// The prefix of each line --stream all shows: "[rank N] ", or torchrun's
// --log-line-prefix-template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) with its macros ${rank},
// ${local_rank} and ${role_name} (torch.distributed.elastic.utils.macros) filled in. Pure.
#pragma once

#include <optional>
#include <string>

namespace launch {

// The first ${...} of `tmpl` that is none of the three macros; nullopt when all are known.
std::optional<std::string> unknown_prefix_macro(const std::string& tmpl);

// A worker's prefix; an empty template gives the default "[rank N] ".
std::string line_prefix(const std::string& tmpl, int rank, int local_rank, const std::string& role);

}  // namespace launch
