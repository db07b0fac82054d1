// A lease kept alive by a thread of its own, which reports when the lease is lost: the liveness
// of a node in an etcd rendezvous. Keys written with id() vanish when the lease ends, whether
// the node revoked it (stop), or it died, hung or lost the network (etcd lets it expire).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/etcd/client.h"

namespace launch::etcd {

class LeaseKeeper {
 public:
  // Grants a lease of `ttl_s` seconds (on the calling thread, through a client of `opts`: its
  // errors are the client's), then renews it every third of the TTL etcd granted from a thread
  // with a client of its own (without opts' cancel hook: stop() ends its waits). The first
  // client stays for the revoke; stop() and the destructor run on the constructing thread.
  LeaseKeeper(const Options& opts, int64_t ttl_s);
  ~LeaseKeeper();  // stop(Revoke::Yes)
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  int64_t id() const { return id_; }
  int64_t ttl() const { return ttl_; }  // seconds, as etcd granted it

  // Lost: etcd answered that the lease is gone, or no renewal succeeded for a whole TTL (etcd
  // has expired it by then, or will the moment it can). Then the thread ends, and lost_fd()
  // (an eventfd, for the caller's poll loop) becomes readable and stays so.
  int lost_fd() const { return lost_fd_; }
  bool lost() const;
  std::string lost_reason() const;  // "" while not lost

  enum class Revoke { Yes, No };
  // Ends the renewals at once (a renewal in flight is abandoned). Revoke::Yes then revokes the
  // lease (one call within the options' timeout; its failure is ignored: the lease expires
  // anyway), so that its keys go now rather than a TTL later. Idempotent.
  void stop(Revoke revoke = Revoke::Yes);

 private:
  void run();
  void mark_lost(const std::string& why);

  Client client_;  // grants and revokes, on the caller's thread
  Options opts_;   // the thread's: its cancel hook is stop_fd_
  int64_t id_ = 0;
  int64_t ttl_ = 0;
  int stop_fd_ = -1;  // eventfd: stop() writes it, the thread's waits watch it
  int lost_fd_ = -1;  // eventfd
  mutable std::mutex mu_;
  std::string lost_reason_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace launch::etcd
