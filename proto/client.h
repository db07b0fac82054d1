// Client of the launcher's key-value store (see proto/PROTOCOL.md). Used by the worker and by
// `launch kv`. Every call has a timeout; a dropped connection is re-established (and the call
// retried) until that timeout; errors say what was waited for.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace proto {

enum class Status : uint8_t;  // defined in proto/protocol.h

// Every failure of a store call. code() tells timeouts, refusals and job failures apart.
class StoreError : public std::runtime_error {
 public:
  // Cancelled: ClientOptions::cancelled said so while the call waited.
  enum class Kind { Timeout, JobFailed, Refused, Connection, Protocol, NotFound, Invalid, Cancelled };
  StoreError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct ClientOptions {
  std::string address;  // "ip:port"
  std::string job_id;
  std::string token;    // the raw token as handed out in LAUNCH_STORE_TOKEN
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // false: one connection attempt per call, a refused one fails it at once (a probe of whether
  // anybody listens there); true: attempts are retried until connect_timeout (a store starting).
  bool retry_connect = true;
  std::string client_name;  // for the server's log, e.g. "rank 3"
  // Where `address` came from, named in "could not reach the store" errors ("check ...").
  std::string address_source = "LAUNCH_STORE_ADDR";
  // Optional: a descriptor every wait of a call also watches (the launcher's signalfd). When it
  // becomes readable, `cancelled()` is asked; true ends the call with StoreError(Cancelled).
  int cancel_fd = -1;
  std::function<bool()> cancelled;
};

struct WorkerEnv;  // proto/worker_env.h

class Client {
 public:
  // The store the launcher named in the worker's environment (LAUNCH_STORE_ADDR, its token, the
  // job id); named after the rank. Throws StoreError(Invalid) naming a missing variable.
  // `connect_timeout`: how long a store that refuses or cannot be reached is retried
  // (train_resnet: its --comm-timeout).
  static Client from_env(const WorkerEnv& env, std::chrono::milliseconds connect_timeout = std::chrono::seconds(60));

  explicit Client(ClientOptions opts);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  using ms = std::chrono::milliseconds;
  void set(const std::string& key, std::string_view value, ms timeout = std::chrono::seconds(60));
  // Blocks until the key exists. `writer` (e.g. "rank 0") goes into the timeout message.
  std::string get(const std::string& key, ms timeout, const std::string& writer = "");
  int64_t add(const std::string& key, int64_t delta, ms timeout = std::chrono::seconds(60));
  std::vector<bool> check(const std::vector<std::string>& keys, ms timeout = std::chrono::seconds(60));
  void wait(const std::vector<std::string>& keys, ms timeout);
  // Blocks until every key exists; returns their values in the order asked (one round trip).
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, ms timeout);
  bool del(const std::string& key, ms timeout = std::chrono::seconds(60));
  // Sets key to desired if its value equals expected (an absent key matches an empty
  // expected); returns the value now stored.
  std::string compare_set(const std::string& key, std::string_view expected,
                          std::string_view desired, ms timeout = std::chrono::seconds(60));
  void ping(ms timeout = std::chrono::seconds(10));
  // All `world` participants call barrier(name); returns when all have arrived.
  void barrier(const std::string& name, int world, ms timeout);

  const ClientOptions& options() const;  // e.g. for a second connection of another thread

  // The job's failure record, when the launcher has recorded one ("rank 2 exited with code 3").
  std::optional<std::string> job_failure(ms timeout = std::chrono::seconds(10));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace proto
