#include "launcher/etcd/lease_keeper.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>


namespace launch::etcd {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

namespace {

int make_eventfd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw EtcdError(EtcdError::Kind::Connection, std::string("eventfd: ") + std::strerror(errno));
  return fd;
}

void signal_fd(int fd) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);  // cannot fail short of overflow
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

}  // namespace

LeaseKeeper::LeaseKeeper(const Options& opts, int64_t ttl_s) : client_(opts), opts_(opts) {
  stop_fd_ = make_eventfd();
  try {
    lost_fd_ = make_eventfd();
    LeaseGrant g = client_.grant_lease(ttl_s);
    id_ = g.id;
    ttl_ = g.ttl;
  } catch (...) {
    ::close(stop_fd_);
    if (lost_fd_ >= 0) ::close(lost_fd_);
    throw;
  }
  // The thread's client: stop() is its only cancellation.
  opts_.cancel_fd = stop_fd_;
  opts_.cancelled = [] { return true; };
  thread_ = std::thread([this] { run(); });
}

LeaseKeeper::~LeaseKeeper() {
  stop(Revoke::Yes);
  ::close(stop_fd_);
  ::close(lost_fd_);
}

bool LeaseKeeper::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !lost_reason_.empty();
}

std::string LeaseKeeper::lost_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_reason_;
}

void LeaseKeeper::mark_lost(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_reason_ = why;
  }
  signal_fd(lost_fd_);
}

void LeaseKeeper::stop(Revoke revoke) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  signal_fd(stop_fd_);
  if (thread_.joinable()) thread_.join();
  if (revoke == Revoke::Yes && !lost()) {
    try {
      client_.revoke(id_);
    } catch (const EtcdError&) {
      // The lease expires within its TTL anyway.
    }
  }
}

// Renews every ttl/3 (as etcd's own clients do), sooner after a failure; the lease counts as
// lost once a whole TTL has passed since the last renewal etcd confirmed.
void LeaseKeeper::run() {
  Client client(opts_);
  const ms ttl{ttl_ * 1000};
  const ms interval = std::max(ttl / 3, ms(100));
  const ms retry = std::min(interval, ms(250));
  const std::string lease = "etcd at " + opts_.endpoint + ": " + lease_name(id_);
  auto expires = Clock::now() + ttl;  // granted just now
  std::string last_error = "no answer";
  ms wait = interval;
  for (;;) {
    pollfd p{stop_fd_, POLLIN, 0};
    if (::poll(&p, 1, int(wait.count())) > 0) return;  // stop()
    const auto sent = Clock::now();
    if (sent >= expires) {
      mark_lost(lease + " was not renewed for its TTL of " + std::to_string(ttl_) + " s (" + last_error + ")");
      return;
    }
    // A renewal may take until the lease would expire, no longer.
    client.set_timeout(std::min(opts_.timeout, std::max(std::chrono::duration_cast<ms>(expires - sent), ms(1))));
    try {
      int64_t left = client.keep_alive(id_);
      if (left <= 0) {
        mark_lost(lease + " has expired or was revoked (etcd no longer has it)");
        return;
      }
      expires = sent + ms(left * 1000);
      wait = interval;
    } catch (const EtcdError& e) {
      if (e.kind() == EtcdError::Kind::Cancelled && readable(stop_fd_)) return;
      last_error = e.what();
      wait = std::max(ms(0), std::min(retry, std::chrono::duration_cast<ms>(expires - Clock::now())));
    }
  }
}

}  // namespace launch::etcd
