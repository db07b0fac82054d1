// Slurm hostlist expressions ("gpu[01-04,07],cpu-a1") expanded to host names, as
// `scontrol show hostnames` does: ranges keep the zero padding of their lower bound, and a name
// may hold several bracket groups (their product, leftmost group varying slowest).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace launch::slurm {

class HostlistError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Hard cap on the expansion, so a typo like "n[0-999999999]" is an error, not an OOM.
inline constexpr size_t kMaxHosts = 1 << 20;

// Throws HostlistError naming the offending part of the expression.
std::vector<std::string> expand_hostlist(std::string_view expr);

}  // namespace launch::slurm
