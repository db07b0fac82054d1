// The launcher's ONE way of hearing signals, from the moment it owns anything until it exits:
// the stop signals (INT, TERM, HUP, QUIT), SIGCHLD and the checkpoint signal are blocked in
// every thread and read from one signalfd. The supervisor's event loop watches it, and so does
// every wait before it (the Slurm token file, the store calls of the task meeting and of the
// multi-node rendezvous, the drains at the end): a stop signal ends them at once.
#pragma once

#include <signal.h>

#include <optional>
#include <vector>

#include "proto/client.h"

namespace launch {

class StopSignals {
 public:
  // Blocks the signals and opens the signalfd; call before any thread exists, so that every
  // thread inherits the mask. `checkpoint_signal` 0: none. `extra_stop` (--signals-to-handle's
  // SIGUSR1/SIGUSR2) stop the job as the four stop signals do.
  explicit StopSignals(int checkpoint_signal, const std::vector<int>& extra_stop = {});
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int fd() const { return fd_; }
  const sigset_t& child_mask() const { return orig_mask_; }  // the mask workers start with

  // Reads what is pending, without blocking, before the supervisor runs (or between its runs):
  // returns the first stop signal (then remembered: stopped()); SIGCHLD is dropped, a
  // checkpoint signal is logged as having no worker to reach.
  std::optional<int> poll();
  std::optional<int> stopped() const { return stopped_; }
  // poll(), and StopRequested(`doing`) when a stop signal is there.
  void throw_if_stopped(const char* doing);

  // Waits until `fd` is readable or `timeout_ms` passes (false); a stop signal meanwhile throws
  // StopRequested(`doing`).
  bool wait_readable(int fd, int timeout_ms, const char* doing);

  // Calls of this thread that a stop signal ends: the store's (proto::ClientOptions: StoreError
  // Cancelled; see rethrow) and etcd's (launch::etcd::Options: EtcdError Cancelled). Any options
  // with the same cancel hook (cancel_fd, cancelled) take it.
  template <class ClientOptions>
  void attach(ClientOptions& client) {
    client.cancel_fd = fd_;
    client.cancelled = [this] { return poll().has_value(); };
  }
  // A Cancelled StoreError as StopRequested(`doing`); any other error as it is.
  [[noreturn]] void rethrow(const proto::StoreError& e, const char* doing);

 private:
  int fd_ = -1;
  int checkpoint_signal_ = 0;
  sigset_t orig_mask_;
  std::optional<int> stopped_;
};

}  // namespace launch
