// A small synchronous etcd v3 client over etcd's JSON gateway (launcher/etcd/gateway.h says what
// goes over the wire), over libcurl. It is the foundation of the launcher's etcd rendezvous
// backend (`--rdzv-backend etcd --rdzv-endpoint HOST:2379`, `--master etcd://HOST:2379`);
// primitives.h and lease_keeper.h build what a rendezvous needs on top of it.
//
// What every call guarantees:
// - it ends within its timeout (Options::timeout; wait_for_change takes its own), or at once when
//   the cancel hook says so: no call blocks longer, whatever etcd or the network do;
// - it makes ONE attempt and throws EtcdError on failure, whose kind() tells a timeout, an
//   unreachable endpoint, a refusal by etcd (with its gRPC code), an answer that is not etcd's,
//   one larger than Options::max_response_bytes, and a cancellation apart; the message names the
//   endpoint, what was asked ("put '/launch/j/x'"), and where the endpoint came from. Retrying is
//   the caller's decision (wait_ready retries until the server answers);
// - it never holds more than max_response_bytes of an answer in memory, whatever the server
//   announces or streams;
// - writes are linearizable (etcd's), reads too (the gateway's default, not serializable).
//
// A Client keeps its connection to etcd between calls (HTTP keep-alive). It is not thread-safe:
// one Client per thread (a LeaseKeeper makes its own).
//
// Wiring the launcher's stop signals (launcher/stop_signals.h) in, as for proto::ClientOptions:
//   opts.cancel_fd = stop.fd(); opts.cancelled = [&] { return stop.poll().has_value(); };
// then a Cancelled EtcdError while stop.stopped() is the stop signal (StopRequested).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/etcd/gateway.h"

namespace launch::etcd {

class EtcdError : public std::runtime_error {
 public:
  enum class Kind {
    Timeout,     // no (complete) answer within the call's timeout
    Connection,  // cannot connect (refused, name not resolvable), or the connection broke
    Server,      // etcd answered with an error: grpc_code() (5 NOT_FOUND, 11 OUT_OF_RANGE, ...)
    Protocol,    // the answer is not etcd's gateway (garbage, wrong shape, HTTP error page)
    TooLarge,    // the answer exceeded Options::max_response_bytes
    Cancelled,   // Options::cancelled said so while the call waited
    Invalid,     // a bad endpoint or argument: retrying cannot help
  };
  EtcdError(Kind kind, const std::string& what, int grpc_code = 0)
      : std::runtime_error(what), kind_(kind), grpc_code_(grpc_code) {}
  Kind kind() const { return kind_; }
  int grpc_code() const { return grpc_code_; }

 private:
  Kind kind_;
  int grpc_code_;
};

struct Options {
  // "HOST:PORT", "http://HOST:PORT" ("[v6]:PORT" too). TLS (https) is not supported yet.
  std::string endpoint;
  // Named in errors ("check --rdzv-endpoint"), as proto::ClientOptions::address_source.
  std::string endpoint_source = "the etcd endpoint";
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};  // of each unary call
  // What one answer (or one watch, all its lines together) may hold. A rendezvous listing of a
  // thousand nodes' records is well under 1 MiB; etcd itself refuses requests over 1.5 MiB by
  // default. Past it the call fails (TooLarge) and the connection is dropped.
  size_t max_response_bytes = size_t(8) << 20;
  // Optional: a descriptor every wait of a call also watches (the launcher's signalfd). When it
  // becomes readable, `cancelled()` is asked; true ends the call with EtcdError(Cancelled).
  int cancel_fd = -1;
  std::function<bool()> cancelled;
};

// What wait_for_change saw.
struct WatchResult {
  enum class Outcome {
    Changed,    // events holds the first batch of changes after the revision
    TimedOut,   // nothing changed within the timeout
    Compacted,  // the revision is older than etcd's history (compact_revision): re-read
  };
  Outcome outcome = Outcome::TimedOut;
  int64_t revision = 0;  // the store's revision in the last answer
  int64_t compact_revision = 0;
  std::vector<Event> events;
};

class Client {
 public:
  // Checks the endpoint's form (EtcdError Invalid); no I/O until the first call.
  explicit Client(Options opts);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  const Options& options() const;
  const std::string& url() const;  // "http://HOST:PORT"
  // The timeout of the unary calls that follow (Options::timeout).
  void set_timeout(std::chrono::milliseconds timeout);

  // GET /version: the server's version ("3.4.23"). The first call of any other kind asks it once
  // to choose the gateway's path (/v3, or /v3beta for etcd 3.3); older servers are refused.
  std::string server_version();
  // Asks the version until the server answers, retrying every `retry_every` after a Connection
  // or Timeout error; past `timeout` throws Timeout naming the endpoint and the last error.
  void wait_ready(std::chrono::milliseconds timeout,
                  std::chrono::milliseconds retry_every = std::chrono::milliseconds(100));

  // --- Keys ---
  int64_t put(std::string_view key, std::string_view value, int64_t lease = 0);  // its revision
  // range_end "": the key alone; see prefix_end (primitives.h). revision 0: the latest.
  RangeResponse range(std::string_view key, std::string_view range_end = "", int64_t revision = 0);
  std::optional<KeyValue> get(std::string_view key);
  int64_t delete_range(std::string_view key, std::string_view range_end = "");  // keys deleted
  TxnResponse txn(const Txn& txn);

  // --- Leases ---
  LeaseGrant grant_lease(int64_t ttl_s);
  // One renewal: the lease's TTL again, in seconds; 0 when etcd no longer has it (expired or
  // revoked), which is not an error.
  int64_t keep_alive(int64_t lease);
  // Deletes the lease and every key attached to it. false: it did not exist (any more).
  bool revoke(int64_t lease);

  // --- Watch ---
  // Blocks until a key in [key, range_end) changes after `after_revision` (a put or delete at
  // a later revision; one that happened already returns at once), or `timeout` passes
  // (TimedOut, not an error). after_revision 0: from now on. One long-poll on /v3/watch: the
  // connection is dropped when it returns.
  WatchResult wait_for_change(std::string_view key, std::string_view range_end, int64_t after_revision,
                              std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace launch::etcd
