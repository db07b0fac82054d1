// The membership of a job's nodes and the choice of the node that serves its key-value store,
// kept in etcd so that the job survives the loss of any node (the first included): pure logic
// over the primitives (primitives.h, lease_keeper.h), independent of how the launcher drives
// it. Keys, all under /launch/<job_id>/:
//   nodes/<node_id>  a node's record, written with that node's lease: it goes when the node
//                    leaves or dies (a TTL after its last renewal)
//   store            the serving node and its address, with that node's lease: the first node
//                    to create it serves; when it goes, the others' wait returns and the first
//                    of them to create it again takes over
//   job              who may take part: a fingerprint of the job's token (never the token), made
//                    by the first node; a node with another token is refused (admit)
//   membership       the elastic membership record (launcher/elastic/etcd_backend.h)
// An ended job's records go a while after its end (expire_job), so that its id can be used again.
// Node ranks follow the order in which the nodes joined (their keys' create_revision): every
// node computes the same ranks from the same listing, and a node that joins later never moves
// the rank of one before it. Values are versioned JSON envelopes (kNodeFormat, kStoreFormat).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/etcd/client.h"
#include "launcher/etcd/lease_keeper.h"
#include "launcher/etcd/primitives.h"

namespace launch::etcd {

// The rendezvous cannot go on: a node id taken, nodes missing at the timeout, a record that
// is not ours. The message names the job and what to do.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --- Keys and records (pure) ---
inline constexpr std::string_view kNodeFormat = "launch.etcd.node";
inline constexpr std::string_view kStoreFormat = "launch.etcd.store";
inline constexpr std::string_view kJobFormat = "launch.etcd.job";
inline constexpr int kRecordVersion = 1;
// A node's record (the caller's, e.g. its hosts and ports) is at most this long: a listing of
// 1,000 nodes stays far below Options::max_response_bytes.
inline constexpr size_t kMaxRecordBytes = 4096;

// RendezvousError for a job id or node id that cannot be part of a key (empty, longer than 128
// bytes, or with a byte outside printable ASCII).
void check_id(std::string_view what, std::string_view id);
std::string job_prefix(std::string_view job_id);    // "/launch/<job_id>/"
std::string nodes_prefix(std::string_view job_id);  // "/launch/<job_id>/nodes/"
std::string store_key(std::string_view job_id);     // "/launch/<job_id>/store"
std::string job_key(std::string_view job_id);       // "/launch/<job_id>/job"
std::string membership_key(std::string_view job_id);  // "/launch/<job_id>/membership"
inline constexpr std::string_view kJobsPrefix = "/launch/";  // every job's keys

std::string encode_node_record(std::string_view record);
// The caller's record; RendezvousError naming `key` for another format, version or size.
std::string decode_node_record(std::string_view key, std::string_view value);

struct StoreHolder {
  std::string node_id;
  std::string address;       // where the store listens, "HOST:PORT"
  int64_t mod_revision = 0;  // of the store key, for wait_store_vacant and resign_store
  int64_t lease = 0;         // the holder's lease, for evict_store
  bool mine = false;         // this node serves it
};
std::string encode_store_record(std::string_view node_id, std::string_view address);
StoreHolder decode_store_record(std::string_view key, const KeyValue& kv);

// The job record: the fingerprint of the job's token (proto::token_fingerprint, 64 hex).
std::string encode_job_record(std::string_view token_fingerprint);
std::string decode_job_record(std::string_view key, std::string_view value);  // the fingerprint

// The other jobs at an etcd, for the message of a rendezvous that found nobody: from a listing
// of kJobsPrefix, the ids of the jobs with nodes registered and how many, but `except`.
std::vector<std::pair<std::string, size_t>> jobs_with_nodes(const Listing& listing, std::string_view except);

struct Member {
  std::string node_id;
  std::string record;
  int64_t joined_revision = 0;  // create_revision of its key: the rank order
};

struct Membership {
  int64_t revision = 0;  // the listing's; waits continue from it
  std::vector<Member> nodes;  // in rank order
  // -1 when the node is not a member.
  int rank_of(std::string_view node_id) const;
};
// The members under `job_id` in a listing of nodes_prefix(job_id), in rank order.
Membership membership_from(std::string_view job_id, const Listing& listing);

// --- One node's part ---
struct RendezvousConfig {
  Options etcd;                // endpoint, timeouts, the cancel hook (StopSignals::attach)
  std::string job_id;          // --rdzv-id / the job id: one namespace per job
  std::string node_id;         // unique per launcher run (e.g. multinode::make_node_id())
  int64_t lease_ttl_s = 10;    // a node that dies is gone from the membership this long after
};

class EtcdRendezvous {
 public:
  // Checks the ids and grants this node's lease (kept alive from then on); writes nothing.
  explicit EtcdRendezvous(RendezvousConfig cfg);
  ~EtcdRendezvous();  // leave()

  // Registers this node with `record`. RendezvousError when its id is registered already.
  void join(std::string_view record);
  Membership members();
  // Blocks until at least `count` nodes are members; RendezvousError at the timeout naming how
  // many joined and who.
  Membership wait_for_members(size_t count, std::chrono::milliseconds timeout);
  // Blocks until the membership is no longer `seen` (a node joined, left or expired); nullopt
  // at the timeout.
  std::optional<Membership> wait_for_change(const Membership& seen, std::chrono::milliseconds timeout);

  // Offers to serve the store at `address`: the first node to ask wins (mine == true); every
  // other gets the holder. Ask again after wait_store_vacant.
  StoreHolder claim_store(std::string_view address);
  // Blocks until `holder`'s claim is gone (it resigned, left, or its lease expired): true; or
  // the timeout passes: false.
  bool wait_store_vacant(const StoreHolder& holder, std::chrono::milliseconds timeout);
  // Gives the store up, if this node still holds it.
  void resign_store(const StoreHolder& mine);
  // The job has found `holder`'s node lost (its store unreachable): revokes that node's lease,
  // so that its claim and its node key go now rather than a TTL later. A node that is alive after
  // all finds its lease lost and joins again. false: the lease was gone already.
  bool evict_store(const StoreHolder& holder);

  // The first node writes the job record with `token_fingerprint`; every other is let in when
  // its fingerprint is the record's (false: another token).
  bool admit(std::string_view token_fingerprint);
  // The job is over: its records (the membership record and the job record) are attached to a
  // lease of `ttl_s` seconds of their own, so that they go that long after the end and the job id
  // can be used again, all on one lease. Best effort (records changed meanwhile are left as they are).
  void expire_job(int64_t ttl_s);

  // Readable once this node's lease is lost (lease_keeper.h): it is no member any more, and no
  // longer the store's host; the caller stops its workers and joins again.
  int lost_fd() const { return lease_->lost_fd(); }
  LeaseKeeper& lease() { return *lease_; }
  const RendezvousConfig& config() const { return cfg_; }
  // Revokes the lease: this node's keys go at once. Idempotent.
  void leave();

 private:
  RendezvousConfig cfg_;
  Client client_;
  std::unique_ptr<LeaseKeeper> lease_;
};

}  // namespace launch::etcd
