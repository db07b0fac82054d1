#include "launcher/slurm/hostlist.h"

#include <cstdint>

namespace launch::slurm {
namespace {

[[noreturn]] void fail(std::string_view expr, const std::string& why) {
  throw HostlistError("invalid hostlist '" + std::string(expr) + "': " + why);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// "01-04,07" -> {"01","02","03","04","07"}
std::vector<std::string> expand_ranges(std::string_view expr, std::string_view body) {
  std::vector<std::string> out;
  if (body.empty()) fail(expr, "empty brackets []");
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty()) fail(expr, "empty element in [" + std::string(body) + "]");
    size_t dash = item.find('-');
    std::string_view lo = item.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi))
      fail(expr, "'" + std::string(item) + "' is not a number or a range like 01-04");
    if (lo.size() > 18 || hi.size() > 18) fail(expr, "'" + std::string(item) + "' is too large");
    uint64_t a = std::stoull(std::string(lo)), b = std::stoull(std::string(hi));
    if (a > b) fail(expr, "range '" + std::string(item) + "' runs backwards");
    if (b - a >= kMaxHosts) fail(expr, "range '" + std::string(item) + "' has too many hosts");
    size_t width = lo.size();  // Slurm pads to the width of the lower bound
    for (uint64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(std::move(s));
      if (out.size() > kMaxHosts) fail(expr, "expands to more than " + std::to_string(kMaxHosts) + " hosts");
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One name with zero or more bracket groups: "rack[1-2]-n[01-03]".
void expand_name(std::string_view expr, std::string_view name, std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    std::string_view literal = name.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    if (literal.find(']') != std::string_view::npos) fail(expr, "']' without '['");
    for (auto& p : partial) p.append(literal);
    if (open == std::string_view::npos) break;
    size_t close = name.find(']', open);
    if (close == std::string_view::npos) fail(expr, "'[' without ']'");
    std::string_view body = name.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos) fail(expr, "nested '['");
    std::vector<std::string> values = expand_ranges(expr, body);
    if (partial.size() * values.size() > kMaxHosts)
      fail(expr, "expands to more than " + std::to_string(kMaxHosts) + " hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial)
      for (const auto& v : values) next.push_back(p + v);
    partial = std::move(next);
    i = close + 1;
  }
  if (out.size() + partial.size() > kMaxHosts)
    fail(expr, "expands to more than " + std::to_string(kMaxHosts) + " hosts");
  for (auto& p : partial) out.push_back(std::move(p));
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr) {
  std::vector<std::string> hosts;
  if (expr.empty()) throw HostlistError("invalid hostlist '': it is empty");
  // Split on the commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= expr.size(); ++i) {
    char c = i < expr.size() ? expr[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) fail(expr, "']' without '['");
    if (c == ' ' || c == '\t' || c == '\n') fail(expr, "it contains white space");
    if (c == ',' && depth == 0) {
      std::string_view name = expr.substr(start, i - start);
      if (name.empty()) fail(expr, "empty host name");
      expand_name(expr, name, hosts);
      start = i + 1;
    }
  }
  if (depth != 0) fail(expr, "'[' without ']'");
  return hosts;
}

}  // namespace launch::slurm
