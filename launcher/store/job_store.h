// The job's rendezvous store (store/store_server.h, served on a background thread) as the supervisor
// sees it: an address and a token to export, and a way to publish the root-cause failure.
// The only file of the launcher that knows the store's classes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace launch {

struct JobStore {
  std::string address;  // "ip:port" actually bound
  std::string token;    // 64 hex chars; exported to workers, never logged
  std::function<void(int rank, const std::string& description)> report_failure;
  std::shared_ptr<void> server;  // keeps the server (and its thread) alive
};

// Starts the store of this job on host:port (a port from our reservation, so that no other
// launch hands it to its workers; 0 lets the kernel pick). Throws std::runtime_error naming
// the address when it cannot listen.
JobStore start_job_store(const std::string& host, const std::string& job_id, uint16_t port);

// Multi-node: the store of node 0 on exactly host:port (the other nodes were told --master), with
// the job's shared token; `on_client` as store::StoreServerConfig::on_client. Throws std::runtime_error
// naming the address when it cannot listen.
JobStore start_shared_job_store(const std::string& host, const std::string& job_id, uint16_t port,
                                const std::string& token,
                                std::function<void(const std::string& client_name, bool open)> on_client = {});

}  // namespace launch
