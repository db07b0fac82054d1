#include "launcher/stop_signals.h"

#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/log.h"

namespace launch {

StopSignals::StopSignals(int checkpoint_signal, const std::vector<int>& extra_stop)
    : checkpoint_signal_(checkpoint_signal) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  for (int sig : extra_stop) sigaddset(&set, sig);
  sigaddset(&set, SIGCHLD);
  if (checkpoint_signal) sigaddset(&set, checkpoint_signal);
  SYS_CHECK(pthread_sigmask(SIG_BLOCK, &set, &orig_mask_) == 0 ? 0 : -1);
  fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  SYS_CHECK(fd_);
}

StopSignals::~StopSignals() {
  if (fd_ >= 0) close(fd_);
}

std::optional<int> StopSignals::poll() {
  signalfd_siginfo si[16];
  for (;;) {
    const ssize_t n = read(fd_, si, sizeof si);
    if (n <= 0) break;
    for (size_t k = 0; k < static_cast<size_t>(n) / sizeof si[0]; ++k) {
      const int sig = static_cast<int>(si[k].ssi_signo);
      if (sig == SIGCHLD) continue;
      if (sig == checkpoint_signal_) {
        log::warn("received " + signal_name(sig) + " (the checkpoint signal) while no worker runs: nobody to save");
        continue;
      }
      if (!stopped_) stopped_ = sig;
    }
  }
  return stopped_;
}

void StopSignals::throw_if_stopped(const char* doing) {
  if (auto s = poll()) throw StopRequested(*s, doing);
}

bool StopSignals::wait_readable(int fd, int timeout_ms, const char* doing) {
  pollfd p[2] = {{fd, POLLIN, 0}, {fd_, POLLIN, 0}};
  for (;;) {
    throw_if_stopped(doing);
    const int r = ::poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    SYS_CHECK(r);
    if (p[0].revents) return true;
    if (r == 0) return false;
    // Only the signalfd: a stop throws above; anything else goes on waiting (timeout restarts,
    // which a caller bounds by its own deadline).
  }
}

void StopSignals::rethrow(const proto::StoreError& e, const char* doing) {
  if (e.kind() == proto::StoreError::Kind::Cancelled && stopped_) throw StopRequested(*stopped_, doing);
  throw e;
}

}  // namespace launch
