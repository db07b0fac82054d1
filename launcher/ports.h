// Free ports for the trainer endpoints and the master, distinct from ports in use and from those
// of every other `launch` running on this host.
//
// The race, and what we do about it: a port is free only until somebody binds it. We bind a
// socket to port 0 on --host (the kernel picks a port nobody holds) and keep it bound while we
// pick the others, so one job never gets the same port twice and the kernel never hands our
// ports to anyone else's bind(0) meanwhile. The sockets must be closed before the workers start
// (they bind those ports themselves), which reopens a window in which another launch's bind(0)
// could draw the same port before our worker binds it. To close that window between launches,
// each port is also claimed with flock() on <port> in the port-lock folder for the whole life of
// the job: a launch that draws a port another live launch holds the lock of skips it. The kernel
// drops the locks when the launcher dies, even by SIGKILL. What remains is the race with
// unrelated programs binding ports in the window between close() and the worker's bind(), the
// same race torchrun and paddle accept.
//
// The folder is the user's own, $TMPDIR/launch-<uid>/ports (TMPDIR defaults to /tmp), checked
// for owner, type and mode (private_dir.h): a shared /tmp/launch-ports that any local user could
// plant as a file silently switched locking off. So launches of one user coordinate; those of
// different users meet the same race as unrelated programs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace launch {

class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(PortReservation&&) noexcept;
  PortReservation& operator=(PortReservation&&) noexcept;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation();

  const std::vector<uint16_t>& ports() const { return ports_; }
  // Closes the bound sockets so the workers can bind; the locks stay held until destruction.
  void release_sockets();

 private:
  friend PortReservation reserve_ports(const std::string&, int, std::optional<int>, const std::optional<std::string>&);
  std::vector<uint16_t> ports_;
  std::vector<int> sockets_;
  std::vector<int> locks_;
};

// `count` ports on address `host` (IPv4 or IPv6). With start_port: start_port .. start_port+count-1,
// each checked free (UsageError if not). lock_dir: nullopt for port_lock_dir(), empty for no
// cross-launch locks, else a folder checked as port_lock_dir() is.
PortReservation reserve_ports(const std::string& host, int count, std::optional<int> start_port,
                              const std::optional<std::string>& lock_dir = std::nullopt);

// $TMPDIR/launch-<uid>/ports, made or checked; UsageError saying what is wrong and what to do.
std::string port_lock_dir();

}  // namespace launch
