#include "launcher/net_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/errors.h"
#include "proto/address.h"

namespace launch {

namespace {

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (::getnameinfo(sa, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

}  // namespace

std::optional<std::string> resolve_host(const std::string& host, std::string* why) {
  if (proto::is_ip_literal(host)) return host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    if (why) *why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return std::nullopt;
  }
  std::string first, v4;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const std::string ip = numeric(a->ai_addr, a->ai_addrlen);
    if (first.empty()) first = ip;
    if (v4.empty() && a->ai_family == AF_INET) v4 = ip;
  }
  ::freeaddrinfo(res);
  return v4.empty() ? first : v4;
}

std::string route_source_address(const std::string& ip) {
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (proto::is_ipv6_literal(ip)) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&to);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(9);
    ::inet_pton(AF_INET6, ip.c_str(), &s6->sin6_addr);
    to_len = sizeof *s6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&to);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(9);
    ::inet_pton(AF_INET, ip.c_str(), &s4->sin_addr);
    to_len = sizeof *s4;
  }
  const int s = ::socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  SYS_CHECK(s);
  sockaddr_storage me{};
  socklen_t len = sizeof me;
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&to), to_len) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  const int err = errno;
  ::close(s);
  if (!ok) throw UsageError("no route to --master " + ip + " (" + std::strerror(err) + "); give --host");
  return numeric(reinterpret_cast<sockaddr*>(&me), len);
}

}  // namespace launch
