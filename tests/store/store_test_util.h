// Helpers for the store's integration tests: a server with a fresh token, clients for it,
// and a raw socket for speaking (or mangling) the protocol by hand.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "store/store_server.h"
#include "proto/client.h"
#include "proto/codec.h"
#include "proto/token.h"

namespace store_test {

using namespace std::chrono_literals;

struct TestStore {
  store::StoreServerConfig cfg;
  std::unique_ptr<store::StoreServer> server;

  explicit TestStore(store::StoreServerConfig c = {}) : cfg(std::move(c)) {
    if (cfg.job_id == "default") cfg.job_id = "test-job";
    if (cfg.token.empty()) cfg.token = proto::generate_token();
    server = store::StoreServer::start(cfg);
  }
  proto::ClientOptions options(const std::string& name = "test") const {
    proto::ClientOptions o;
    o.address = server->address();
    o.job_id = cfg.job_id;
    o.token = cfg.token;
    o.client_name = name;
    o.connect_timeout = 20s;
    return o;
  }
  proto::Client client(const std::string& name = "test") const { return proto::Client(options(name)); }
};

inline void raise_fd_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

inline long rss_kib() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

// A plain blocking TCP connection with bounded reads.
class RawConn {
 public:
  explicit RawConn(const std::string& address) {
    auto colon = address.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the peer closes or `timeout` passes; returns what arrived and whether it closed.
  std::pair<std::string, bool> read_until_close(std::chrono::milliseconds timeout) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {got, false};
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return {got, true};
      got.append(buf, static_cast<size_t>(n));
    }
  }
  // Reads one reply frame (bounded).
  proto::Decoded<proto::Reply> read_reply(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    for (;;) {
      auto d = proto::decode_reply(buf_, proto::Limits{});
      if (d.state != proto::Parse::NeedMore) {
        if (d.state == proto::Parse::Ok) buf_.erase(0, d.consumed);
        return d;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return d;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return d;
      buf_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

inline std::string hello_frame(const std::string& job, const std::string& token) {
  proto::Request h;
  h.op = proto::Op::Hello;
  h.job_id = job;
  h.token = token;
  h.client_name = "raw";
  return proto::encode_request(h);
}

}  // namespace store_test
