#include "worker/comm/ring_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "proto/ring_hello.h"
#include "worker/comm/ring_comm.h"

namespace worker::ring_io {

namespace {

using ms = std::chrono::milliseconds;
namespace ring = proto::ring;

}  // namespace

std::string errno_text(int err) { return std::strerror(err); }

// --- Sockets

void set_socket_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

sockaddr_in resolve(const std::string& host, uint16_t port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw CommError(what + ": cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  addr.sin_port = htons(port);
  return addr;
}

std::string format_addr(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

std::pair<std::string, uint16_t> split_addr(const std::string& addr, const std::string& what) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) throw CommError(what + ": bad address '" + addr + "'");
  const std::string port = addr.substr(colon + 1);
  bool ok = !port.empty() && port.size() <= 5;
  for (char ch : port) ok = ok && ch >= '0' && ch <= '9';
  if (!ok || std::stoi(port) > 65535) throw CommError(what + ": bad address '" + addr + "'");
  return {addr.substr(0, colon), uint16_t(std::stoi(port))};
}


[[noreturn]] void lost(const Peer& peer, const std::string& msg) {
  if (peer.rank < 0) throw CommError(msg);
  throw CommError(msg, /*peer_lost=*/true, peer.rank);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<ms>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 1 << 30));
}

void wait_fd(int fd, short events, Clock::time_point deadline, const Peer& peer, const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw CommError(what + ": poll: " + errno_text(errno));
    lost(peer, what + ": timed out waiting for " + peer.name);
  }
}

void send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, const Peer& peer,
              const std::string& what) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= size_t(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, deadline, peer, what);
    } else if (k < 0 && errno != EINTR) {
      lost(peer, what + ": sending to " + peer.name + ": " + errno_text(errno));
    }
  }
}

// --- Set-up (proto/ring_hello.h): reading one message, never a byte past it

std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f) {
      out.push_back(char(ch));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return s.size() > 64 ? out + "..." : out;
}

std::string read_message(int fd, std::string& in) {
  char buf[ring::kHeaderSize + 44 + ring::kMaxJobId];
  for (size_t want; (want = ring::bytes_wanted(in)) > 0;) {
    const ssize_t k = ::recv(fd, buf, std::min(want, sizeof buf), 0);
    if (k > 0) {
      in.append(buf, size_t(k));
    } else if (k == 0) {
      return "closed the connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return "";
    } else if (errno != EINTR) {
      return errno_text(errno);
    }
  }
  return "";
}

bool send_now(int fd, const std::string& msg) {
  const ssize_t k = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return k == ssize_t(msg.size());
}

std::string peer_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown address";
  return format_addr(a);
}

}  // namespace worker::ring_io
