#include "launcher/ports.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "launcher/errors.h"
#include "proto/address.h"
#include "launcher/private_dir.h"

namespace launch {

namespace {

// A bound (not listening) socket on host:port (IPv4 or IPv6); -1 with errno when the port is taken.
int bind_port(const std::string& host, uint16_t port, uint16_t* bound) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (proto::is_ipv6_literal(host)) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &a->sin_addr);
    len = sizeof *a;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  SYS_CHECK(fd);
  int one = 1;
  // Lets the worker rebind right after our close; a bound, never-listening socket leaves no
  // TIME_WAIT, but a port the kernel recently used for a connection might.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) < 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  SYS_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len));
  *bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

// -1 when another live launch holds the port; -2 when `dir` is empty (no locking).
int lock_port(const std::string& dir, uint16_t port) {
  if (dir.empty()) return -2;
  const std::string path = dir + "/" + std::to_string(port);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw SystemError("cannot open the port lock " + path, errno);  // in a folder of ours
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string port_lock_dir() {
  const std::string base = temp_dir() + "/launch-" + std::to_string(getuid());
  const std::string way_out = "set TMPDIR to a directory of yours to keep launch's port locks there";
  return private_dir(private_dir(base, way_out) + "/ports", way_out);
}

PortReservation reserve_ports(const std::string& host, int count, std::optional<int> start_port,
                              const std::optional<std::string>& lock_dir) {
  if (!proto::is_ip_literal(host))
    throw UsageError("--host '" + host + "' is not an IP address (e.g. 127.0.0.1 or ::1)");
  PortReservation r;
  const std::string dir = !lock_dir ? port_lock_dir() : lock_dir->empty() ? "" : private_dir(*lock_dir, "");

  if (start_port) {
    if (*start_port + count - 1 > 65535)
      throw UsageError("--start_port " + std::to_string(*start_port) + " leaves no room for " +
                       std::to_string(count) + " ports (the endpoints, the master, the store) below 65536");
    for (int i = 0; i < count; ++i) {
      uint16_t p = static_cast<uint16_t>(*start_port + i);
      uint16_t bound = 0;
      int fd = bind_port(host, p, &bound);
      if (fd < 0)
        throw UsageError("port " + std::to_string(p) + " on " + host + " (from --start_port " +
                         std::to_string(*start_port) + ") is in use; pick another --start_port "
                         "or leave it out to use free ports");
      r.sockets_.push_back(fd);
      const int lk = lock_port(dir, p);
      if (lk == -1)
        throw UsageError("port " + std::to_string(p) + " (from --start_port) is held by another "
                         "launch on this host; pick another --start_port");
      if (lk >= 0) r.locks_.push_back(lk);
      r.ports_.push_back(p);
    }
    return r;
  }

  // Sockets on ports another launch holds stay bound until we are done, so the kernel does not
  // hand them to us again.
  std::vector<int> skipped;
  struct CloseSkipped {
    std::vector<int>& fds;
    ~CloseSkipped() {
      for (int fd : fds) close(fd);
    }
  } close_skipped{skipped};
  for (int attempts = 0; static_cast<int>(r.ports_.size()) < count; ++attempts) {
    if (attempts > 4 * count + 256)
      throw SystemError("could not find " + std::to_string(count) + " free ports on " + host, EADDRINUSE);
    uint16_t p = 0;
    int fd = bind_port(host, 0, &p);
    if (fd < 0) {
      int err = errno;
      if (err == EADDRNOTAVAIL)
        throw UsageError("--host " + host + " is not an address of this machine");
      throw SystemError("bind(" + host + ":0)", err);
    }
    int lk;
    try {
      lk = lock_port(dir, p);
    } catch (...) {
      close(fd);
      throw;
    }
    if (lk == -1) {
      skipped.push_back(fd);
      continue;
    }
    if (lk >= 0) r.locks_.push_back(lk);
    r.sockets_.push_back(fd);
    r.ports_.push_back(p);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------

PortReservation::PortReservation(PortReservation&& o) noexcept { *this = std::move(o); }

PortReservation& PortReservation::operator=(PortReservation&& o) noexcept {
  if (this != &o) {
    release_sockets();
    for (int fd : locks_) close(fd);
    ports_ = std::move(o.ports_);
    sockets_ = std::move(o.sockets_);
    locks_ = std::move(o.locks_);
    o.ports_.clear();
    o.sockets_.clear();
    o.locks_.clear();
  }
  return *this;
}

void PortReservation::release_sockets() {
  for (int fd : sockets_) close(fd);
  sockets_.clear();
}

PortReservation::~PortReservation() {
  release_sockets();
  for (int fd : locks_) close(fd);
  locks_.clear();
}

}  // namespace launch
