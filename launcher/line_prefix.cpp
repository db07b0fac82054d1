#include "launcher/line_prefix.h"

namespace launch {

namespace {

// Calls `macro(name)` for each ${name} of `tmpl` and appends its result, the rest as it is.
template <typename F>
std::string substitute(const std::string& tmpl, F macro) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    const size_t open = tmpl.find("${", i);
    const size_t close = open == std::string::npos ? open : tmpl.find('}', open);
    if (close == std::string::npos) {
      out += tmpl.substr(i);
      break;
    }
    out += tmpl.substr(i, open - i);
    out += macro(tmpl.substr(open + 2, close - open - 2));
    i = close + 1;
  }
  return out;
}

}  // namespace

std::optional<std::string> unknown_prefix_macro(const std::string& tmpl) {
  std::optional<std::string> unknown;
  substitute(tmpl, [&](const std::string& name) {
    if (name != "rank" && name != "local_rank" && name != "role_name" && !unknown) unknown = "${" + name + "}";
    return std::string();
  });
  return unknown;
}

std::string line_prefix(const std::string& tmpl, int rank, int local_rank, const std::string& role) {
  if (tmpl.empty()) return "[rank " + std::to_string(rank) + "] ";
  return substitute(tmpl, [&](const std::string& name) {
    if (name == "rank") return std::to_string(rank);
    if (name == "local_rank") return std::to_string(local_rank);
    return role;  // role_name: the only other one unknown_prefix_macro lets through
  });
}

}  // namespace launch
