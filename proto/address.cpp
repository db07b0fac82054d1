#include "proto/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace proto {

std::optional<HostPort> split_host_port(const std::string& text, bool allow_zero) {
  std::string host;
  size_t port_at = 0;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
    host = text.substr(1, close - 1);
    if (!is_ipv6_literal(host)) return std::nullopt;
    port_at = close + 2;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    host = text.substr(0, colon);
    if (host.find(':') != std::string::npos) return std::nullopt;  // IPv6 needs its brackets
    port_at = colon + 1;
  }
  const std::string port = text.substr(port_at);
  if (host.empty() || port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int p = std::stoi(port);
  if (p > 65535 || (p == 0 && !allow_zero)) return std::nullopt;
  return HostPort{host, static_cast<uint16_t>(p)};
}

std::string join_host_port(const std::string& host, uint16_t port) {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

bool is_ipv4_literal(const std::string& host) {
  in_addr a;
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1;
}

bool is_ipv6_literal(const std::string& host) {
  in6_addr a;
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

}  // namespace proto
