// "host:port" as the launcher hands addresses out (LAUNCH_STORE_ADDR, PADDLE_MASTER,
// PADDLE_TRAINER_ENDPOINTS, --master) and reads them back: an IPv6 host is bracketed
// ("[::1]:29400", RFC 3986), anything else is written as it is ("10.0.0.1:29400",
// "master-0:29400"). Pure: no resolver, no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace proto {

struct HostPort {
  std::string host;  // without brackets: "::1", "10.0.0.1", "master-0"
  uint16_t port = 0;
};

// "HOST:PORT" or "[V6]:PORT" with a port 1..65535 (0 too with allow_zero). nullopt for anything
// else: no port, an empty host, an unbracketed IPv6 host ("::1:80" is ambiguous), junk after "]".
std::optional<HostPort> split_host_port(const std::string& text, bool allow_zero = false);

// The inverse: brackets around a host that contains ':' (an IPv6 address).
std::string join_host_port(const std::string& host, uint16_t port);

bool is_ipv4_literal(const std::string& host);
bool is_ipv6_literal(const std::string& host);  // without brackets
inline bool is_ip_literal(const std::string& host) { return is_ipv4_literal(host) || is_ipv6_literal(host); }

}  // namespace proto
