// An in-process store on 127.0.0.1 (kernel-picked port) and helpers for the store-backed tests.
#pragma once

#include <poll.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "launcher/multinode/layout.h"
#include "store/store_server.h"
#include "proto/client.h"

namespace mntest {

inline const std::string kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Store {
  std::unique_ptr<store::StoreServer> server;
  // `on_client`: as the launcher serving the store hooks its presence tracking in.
  explicit Store(std::function<void(const std::string&, bool)> on_client = {}) {
    store::StoreServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.job_id = "mn-test";
    cfg.token = kToken;
    cfg.on_client = std::move(on_client);
    server = store::StoreServer::start(cfg);
  }
  proto::ClientOptions client(const std::string& token = kToken) const {
    proto::ClientOptions o;
    o.address = server->address();
    o.job_id = "mn-test";
    o.token = token;
    o.connect_timeout = std::chrono::seconds(5);
    return o;
  }
};

// Node `i`: `nproc` processes on host 127.0.0.1, ports unique per node.
inline launch::multinode::NodeRegistration node(int i, int nproc, int rank = -1) {
  launch::multinode::NodeRegistration r;
  r.host = "127.0.0.1";
  r.hostname = "node" + std::to_string(i);
  r.requested_rank = rank;
  r.nproc = nproc;
  for (int k = 0; k < nproc; ++k) r.endpoints.push_back("127.0.0.1:" + std::to_string(7000 + 100 * i + k));
  r.master_endpoint = "127.0.0.1:" + std::to_string(6900 + i);
  return r;
}

// True when `fd` becomes readable within `timeout`.
inline bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, int(timeout.count())) == 1 && (p.revents & POLLIN);
}

}  // namespace mntest
