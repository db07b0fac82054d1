// The ring's rendezvous (ring_comm.h): the launcher's store, or the fixed endpoints of a launcher
// without one.
#include <string>
#include <utility>
#include <vector>

#include "proto/client.h"
#include "worker/comm/ring_comm.h"

namespace worker {

namespace {

using ms = std::chrono::milliseconds;

class StoreRendezvous final : public Rendezvous {
 public:
  StoreRendezvous(proto::Client& c, ms timeout) : client_(c), timeout_(timeout) {}
  void publish(const std::string& key, const std::string& value) override { client_.set(key, value, timeout_); }
  std::string lookup(const std::string& key, ms timeout, const std::string& writer) override {
    return client_.get(key, timeout, writer);
  }

 private:
  proto::Client& client_;
  ms timeout_;
};

// Fixed endpoints (PADDLE_TRAINER_ENDPOINTS): nothing to publish, every address is known.
class EndpointRendezvous final : public Rendezvous {
 public:
  EndpointRendezvous(std::vector<std::string> endpoints, std::string prefix)
      : endpoints_(std::move(endpoints)), prefix_(std::move(prefix) + "/addr/") {}
  void publish(const std::string&, const std::string&) override {}
  std::string lookup(const std::string& key, ms, const std::string& writer) override {
    if (key.compare(0, prefix_.size(), prefix_) == 0) {
      const size_t r = size_t(std::stoul(key.substr(prefix_.size())));
      if (r < endpoints_.size()) return endpoints_[r];
    }
    throw CommError("no endpoint for " + writer);
  }

 private:
  std::vector<std::string> endpoints_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<Rendezvous> make_endpoint_rendezvous(const std::vector<std::string>& endpoints,
                                                     const std::string& key_prefix) {
  return std::make_unique<EndpointRendezvous>(endpoints, key_prefix);
}

std::unique_ptr<Rendezvous> make_store_rendezvous(proto::Client& client, std::chrono::milliseconds timeout) {
  return std::make_unique<StoreRendezvous>(client, timeout);
}

}  // namespace worker
