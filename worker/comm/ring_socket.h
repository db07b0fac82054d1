// The CPU ring's socket layer (ring_comm.cpp): an owned descriptor, addresses, bounded waits and
// sends that name the peer they wait for, and the set-up's reads of one message at a time
// (proto/ring_hello.h). Every failure is a CommError (ring_comm.h); one caused by a ring peer that
// vanished is peer_lost() and names its rank.
#pragma once

#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace worker::ring_io {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Who is on the other side of a socket, for errors: a name and, for a ring peer, its rank.
struct Peer {
  std::string name;
  int rank = -1;  // -1: not (yet) known to be a ring peer
};

std::string errno_text(int err);

// --- Sockets

void set_socket_options(int fd);  // TCP_NODELAY, non-blocking
sockaddr_in resolve(const std::string& host, uint16_t port, const std::string& what);
std::string format_addr(const sockaddr_in& a);  // "ip:port"
std::pair<std::string, uint16_t> split_addr(const std::string& addr, const std::string& what);
std::string peer_address(int fd);  // the other end's "ip:port", for the log

// The peer vanished: what train_resnet reports to the launcher as the rank at fault.
[[noreturn]] void lost(const Peer& peer, const std::string& msg);

int remaining_ms(Clock::time_point deadline);
// Waits for `events` on fd until the deadline; throws naming `peer` on timeout.
void wait_fd(int fd, short events, Clock::time_point deadline, const Peer& peer, const std::string& what);
void send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, const Peer& peer,
              const std::string& what);

// --- Set-up (proto/ring_hello.h): reading one message, never a byte past it

// A job id or other text a stranger sent, fit for one log line.
std::string printable(const std::string& s);
// Reads into `in` what completes the message it starts (ring::bytes_wanted), as far as the socket
// has it. Returns "" (complete, or more to come) or why the connection is over.
std::string read_message(int fd, std::string& in);
// A set-up message to a connection that has not proved itself: sent at once or not at all (it
// is at most 80 bytes into an empty socket buffer; a peer that cannot take them is dropped).
bool send_now(int fd, const std::string& msg);

}  // namespace worker::ring_io
