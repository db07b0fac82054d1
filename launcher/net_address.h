// Addresses on this machine's network: names resolved, the source address that routes to a
// peer. IPv4 and IPv6 alike; the pure "host:port" spelling is proto/address.h's.
#pragma once

#include <optional>
#include <string>

namespace launch {

// `host` as a numeric address: an IP literal as it is, a name through getaddrinfo (IPv4 first
// when a name has both, as getaddrinfo orders them). nullopt when it does not resolve (now: a
// pod's name may resolve later), with the resolver's reason in *why.
std::optional<std::string> resolve_host(const std::string& host, std::string* why = nullptr);

// The local address the kernel would use to reach `ip` (UDP connect, nothing sent). Throws
// UsageError naming --master when there is no route.
std::string route_source_address(const std::string& ip);

}  // namespace launch
