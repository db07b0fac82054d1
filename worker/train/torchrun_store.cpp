#include "worker/train/torchrun_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "store/store_server.h"

namespace worker {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// How long rank 0 keeps the store up for the others after its own training ended.
constexpr seconds kDrainTimeout{60};

std::string host_of(const std::string& endpoint) { return endpoint.substr(0, endpoint.rfind(':')); }
uint16_t port_of(const std::string& endpoint) { return uint16_t(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))); }

// MASTER_ADDR as an IPv4 address (a name such as "localhost" or a host name is resolved).
std::string resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw EnvError(std::string(proto::env::kMasterAddr) + "=" + host + " does not resolve: " + ::gai_strerror(rc));
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  ::freeaddrinfo(res);
  return buf;
}

// The local address the kernel would use to reach `ip` (a UDP connect sends nothing).
std::string route_to(const std::string& ip) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  ::inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  const bool ok = s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  if (s >= 0) ::close(s);
  if (!ok) throw EnvError("no route to " + std::string(proto::env::kMasterAddr) + " " + ip);
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
  return buf;
}

std::string done_key(int rank) { return "torchrun/done/" + std::to_string(rank); }

}  // namespace

TorchrunStore::TorchrunStore(const WorkerEnv& env, milliseconds connect_timeout) : rank_(env.rank), world_(env.world) {
  using namespace proto::env;
  if (!env.master)
    throw EnvError(std::string(kWorldSize) + "=" + std::to_string(env.world) + " but neither " + kStoreAddr +
                   " nor " + kMasterAddr + "/" + kMasterPort + " is set: start the ranks with launch or torchrun");
  if (env.agent_store)
    throw EnvError(std::string(kTorchUseAgentStore) + "=True: torchrun's agent serves its own TCPStore on " +
                   kMasterPort + ", which train_resnet cannot use; start torchrun with --rdzv-backend c10d (or "
                   "--standalone), or use launch");
  const std::string ip = resolve_ipv4(host_of(*env.master));
  const uint16_t port = port_of(*env.master);
  local_host_ = rank_ == 0 ? ip : route_to(ip);
  // No secret comes with this contract: the store is as private as TORCHELASTIC_RUN_ID (torch's
  // own TCPStore on that port has no authentication at all).
  const std::string token = "torchrun/" + env.job_id;
  if (rank_ == 0) {
    // The store's messages go to stderr: stdout is the training log.
    spdlog::set_default_logger(spdlog::stderr_color_mt("train_resnet-store"));
    store::StoreServerConfig cfg;
    cfg.host = ip;
    cfg.port = port;
    cfg.job_id = env.job_id;
    cfg.token = token;
    try {
      server_ = store::StoreServer::start(cfg);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank 0 cannot serve the job's store on " + std::string(kMasterAddr) + ":" +
                               kMasterPort + " = " + ip + ":" + std::to_string(port) + " (" + e.what() +
                               "); is another job on that port, or is MASTER_ADDR not this host?");
    }
  }
  proto::ClientOptions o;
  o.address = ip + ":" + std::to_string(port);
  o.address_source = std::string(kMasterAddr) + " and " + kMasterPort;
  o.job_id = env.job_id;
  o.token = token;
  o.client_name = env.who();
  o.connect_timeout = connect_timeout;
  client_.emplace(std::move(o));
}

TorchrunStore::~TorchrunStore() {
  if (std::uncaught_exceptions() > 0 || !client_) return;  // failing: torchrun stops the others
  try {
    if (rank_ != 0) {
      client_->set(done_key(rank_), "1", seconds(10));
      return;
    }
    std::vector<std::string> keys;
    for (int r = 1; r < world_; ++r) keys.push_back(done_key(r));
    if (!keys.empty()) client_->wait(keys, kDrainTimeout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_resnet: warning: rank %d: closing the torchrun store: %s\n", rank_, e.what());
  }
}

}  // namespace worker
