// The store's key-value state machine: a pure component, requests in, replies out. No sockets,
// no clocks of its own (the caller passes `now`), no threads. A blocking request (GET, WAIT,
// MULTI_GET whose keys are missing) parks its client; the client is answered when the keys
// appear, when its deadline passes (expire), when the job fails (fail_job) -- never by polling.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proto/codec.h"

namespace proto {

using ClientId = uint64_t;
using Clock = std::chrono::steady_clock;

// A reply addressed to one client; `op` is the op of the request it answers.
struct Outgoing {
  ClientId client;
  Op op;
  Reply reply;
};

// --- Handshake (pure) ---
// Checks a HELLO against this store's token (compared in constant time), then its job id.
// Returns Ok, BadToken (whatever the job id), or BadJob for the right token with another job
// id. Messages never contain a token or this store's job id.
Reply check_hello(const Request& hello, std::string_view job_id, std::string_view token);

// --- Key-value state ---
class KvState {
 public:
  explicit KvState(Limits limits = {}) : limits_(limits) {}

  // One request of an authenticated client. Replies -- to this client, or to parked clients
  // this request wakes -- are appended to `out`. A client has at most one parked request:
  // the caller must not hand it another until it has been answered (see parked()).
  void handle(ClientId client, const Request& req, Clock::time_point now,
              std::vector<Outgoing>& out);
  // Answers TIMEOUT to every parked request whose deadline is <= now.
  void expire(Clock::time_point now, std::vector<Outgoing>& out);
  // The earliest deadline of a parked request, for the event loop's timer.
  std::optional<Clock::time_point> next_deadline() const;
  // The client went away: forget its parked request, if any.
  void drop_client(ClientId client);
  // Records the job's failure under kJobFailedKey and answers JOB_FAILED (message: record) to
  // every parked request; from now on a request that would park gets JOB_FAILED at once.
  // The first call wins: returns false (and changes nothing) if the job had already failed.
  bool fail_job(const std::string& record, std::vector<Outgoing>& out);

  bool parked(ClientId client) const { return waiters_.count(client) != 0; }
  size_t parked_count() const { return waiters_.size(); }
  size_t key_count() const { return data_.size(); }
  // What the quota counts (Limits::max_store_bytes): key + value + kEntryCharge per key.
  size_t stored_bytes() const { return bytes_; }
  // Changes whenever any key's value does: lets a caller memoise an answer (the server
  // reuses one encoded MULTI_GET reply for identical requests while this is unchanged).
  uint64_t generation() const { return generation_; }
  const std::optional<std::string>& job_failure() const { return failure_; }

 private:
  struct Waiter {
    Op op;
    std::vector<std::string> keys;
    size_t missing = 0;  // occurrences of keys not yet seen
    Clock::time_point deadline;
  };

  // Stores `value` under `key`, or answers QUOTA_EXCEEDED (`what`: the request, for the message)
  // when that would take the store past its quota. A write that does not grow it always passes.
  Reply set_value(const std::string& key, std::string value, const std::string& what, std::vector<Outgoing>& out);
  static size_t charge(const std::string& key, size_t value_size) { return key.size() + value_size + kEntryCharge; }
  void notify(const std::string& key, std::vector<Outgoing>& out);
  // Either answers at once (all keys present, job failed, zero timeout) or parks.
  void block_or_answer(ClientId c, const Request& req, Clock::time_point now,
                       std::vector<Outgoing>& out);
  // Answer for a request whose keys are all present.
  Reply answer(Op op, const std::vector<std::string>& keys) const;
  void unpark(ClientId c);
  std::string missing_keys(const std::vector<std::string>& keys) const;

  Limits limits_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<ClientId, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<ClientId>> watchers_;  // key -> parked clients
  std::set<std::pair<Clock::time_point, ClientId>> deadlines_;
  std::optional<std::string> failure_;
  uint64_t generation_ = 0;
  size_t bytes_ = 0;  // sum of charge() over data_
};

}  // namespace proto
