// The rendezvous store served by `launch` for the workers of its job (proto/PROTOCOL.md).
// Runs its own single-threaded epoll loop on a background thread; the supervisor talks to it
// only through the thread-safe calls below.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace launch {

struct StoreServerConfig {
  std::string host = "127.0.0.1";  // address to listen on; never 0.0.0.0 unless asked
  uint16_t port = 0;               // 0: the kernel picks
  std::string job_id = "default";
  std::string token;               // raw token bytes (hex), see proto::generate_token()
};

class StoreServer {
 public:
  // Binds and starts serving. Throws std::runtime_error naming the address on failure.
  static std::unique_ptr<StoreServer> start(const StoreServerConfig& cfg);
  virtual ~StoreServer() = default;  // stops the loop, closes every connection

  virtual std::string address() const = 0;  // "ip:port" actually bound
  // Records the job's failure under the reserved key and wakes every parked waiter with
  // JOB_FAILED. Thread-safe; the first call wins.
  virtual void report_failure(int rank, const std::string& description) = 0;
};

}  // namespace launch
