// The rendezvous store (proto/PROTOCOL.md): served by `launch` for the workers of its job, and
// by train_resnet's rank 0 under torchrun's contract (worker/train/torchrun_store.h), so it sits
// below both, on launch_proto and spdlog alone. Runs its own single-threaded epoll loop on a
// background thread; its owner talks to it only through the thread-safe calls below.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "proto/protocol.h"

namespace store {

struct StoreServerConfig {
  std::string host = "127.0.0.1";  // address to listen on; never 0.0.0.0 unless asked
  uint16_t port = 0;               // 0: the kernel picks
  std::string job_id = "default";
  std::string token;               // raw token bytes (hex), see proto::generate_token()
  proto::Limits limits{};          // key/value size limits (may only be lowered)
  // Closed and logged: a connection that has sent part of a frame and then nothing for this
  // long, or that has not hung up this long after its final error reply.
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(10)};
  // Before authentication (proto/PROTOCOL.md, "Before HELLO"): a connection must have completed
  // its HELLO this long after connecting, and all connections that have not share this many
  // bytes -- their input, at most one HELLO each, and a fixed charge per connection for its
  // bookkeeping. A new one past the budget closes the oldest of them, so that strangers cannot
  // hold the memory or keep a worker's HELLO from being read.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  size_t preauth_budget = size_t(4) << 20;
  std::chrono::milliseconds sweep_interval{std::chrono::milliseconds(250)};  // stall checks
  // Told of every authenticated connection when its HELLO is accepted (open) and when it ends
  // (not at the store's own end), with its HELLO's client name (printable, at most 64 bytes).
  // Called on the store's thread: must be quick and must not call the store. The multi-node
  // launcher that serves the store learns this way, within milliseconds, that another node's
  // launcher died: the kernel closes its connections (multinode/presence.h).
  std::function<void(const std::string& client_name, bool open)> on_client;
};

// The store could not listen on its address; errno_value tells a port another process holds
// (EADDRINUSE) from an address this machine does not have (EADDRNOTAVAIL), so that a launcher
// can join the store that is there instead of serving one.
class ListenError : public std::runtime_error {
 public:
  ListenError(const std::string& what, int errno_value) : std::runtime_error(what), errno_(errno_value) {}
  int errno_value() const { return errno_; }

 private:
  int errno_;
};

class StoreServer {
 public:
  // Binds and starts serving. Throws ListenError when it cannot listen, std::runtime_error for
  // anything else, naming the address.
  static std::unique_ptr<StoreServer> start(const StoreServerConfig& cfg);
  virtual ~StoreServer() = default;  // stops the loop, closes every connection

  virtual std::string address() const = 0;  // "ip:port" actually bound
  // Records the job's failure ("rank <rank>: <description>", e.g. "rank 2: exited with code 3")
  // under the reserved key and wakes every parked waiter with
  // JOB_FAILED. Thread-safe; the first call wins.
  virtual void report_failure(int rank, const std::string& description) = 0;

  // For logs and tests: open connections and requests parked in GET/WAIT/MULTI_GET, as of
  // the end of the loop's last iteration.
  virtual size_t connection_count() const = 0;
  virtual size_t parked_waiters() const = 0;
};

}  // namespace store
