// Where the nodes of an elastic job meet, and whose key-value store a round uses: the one part of
// the elastic job mode (elastic_job.cpp) that differs between the two rendezvous backends.
//   - launch's own store (store_site.cpp): the membership record lives in the store on --master,
//     which the launch that wins the bind serves for the whole job. Its loss ends the job, as
//     with torchrun's c10d.
//   - etcd (etcd_site.cpp; --rdzv-backend etcd, --master etcd://): the record and the nodes'
//     leases live in etcd; the store is served by the node that holds etcd's claim on it, and when
//     that node is lost the survivors evict it and one of them serves a fresh store. The job
//     survives the loss of any node.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/elastic/membership.h"
#include "launcher/elastic/membership_backend.h"
#include "launcher/multinode/presence.h"
#include "launcher/plan.h"
#include "launcher/stop_signals.h"

namespace launch {

// A call's cancellation, as both clients take it (cancel_fd + cancelled): the launcher's stop
// signals on the main thread, a thread's own eventfd elsewhere.
struct CancelHook {
  int fd = -1;
  std::function<bool()> cancelled;
  template <class ClientOptions>
  void apply(ClientOptions& o) const {
    o.cancel_fd = fd;
    o.cancelled = cancelled;
  }
};

// The store a round uses: the workers' LAUNCH_STORE_ADDR, the heartbeat monitor's.
struct RoundStore {
  std::string address;  // "ip:port"
  std::string source;   // where it came from, for "could not reach the store" errors
  bool serves = false;  // this launcher serves it ...
  std::shared_ptr<multinode::Presence> presence;  // ... and who is connected to it (presence.h)
};

class ElasticSite {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~ElasticSite() = default;
  // This node's address for its endpoints: --host, else the one that routes to the site.
  virtual const std::string& host() const = 0;
  // A backend for the calling thread (one per thread), its calls ended by `hook`; a store that
  // is not up yet is retried for `connect_timeout`.
  virtual std::unique_ptr<elastic::MembershipBackend> backend(const CancelHook& hook,
                                                              std::chrono::milliseconds connect_timeout) const = 0;
  // Before each round's rendezvous: the store the round uses. `ended`: how this node's last
  // round ended (the nodes it lost). Throws UsageError for a node that is not let in, and
  // std::runtime_error when no store is there by `deadline`.
  virtual RoundStore round_store(const std::optional<elastic::RoundEnd>& ended, Clock::time_point deadline) = 0;
  // The job is over (finished or failed) as far as this node is concerned.
  virtual void job_over() {}
  // For the message of a rendezvous that timed out: what else the site sees ("" : nothing).
  virtual std::string timeout_hint() { return ""; }
  // For the message of a rendezvous that failed: what that means here.
  virtual std::string failure_note() const = 0;
};

// Meets the other launches at --master as a fixed-size job does (multinode/store_host.h).
std::unique_ptr<ElasticSite> make_store_site(const Plan& p, StopSignals& stops, ElasticSite::Clock::time_point deadline);
// Waits for etcd at --rdzv-endpoint (until `deadline`), checks the token, registers this node
// (`node_id`, described as `who`) with a lease. UsageError where this launch has no etcd client.
std::unique_ptr<ElasticSite> make_etcd_site(const Plan& p, StopSignals& stops, ElasticSite::Clock::time_point deadline,
                                            const std::string& node_id, const std::string& who);

}  // namespace launch
