// The client against servers that are not etcd, on 127.0.0.1: what they answer must end every
// call with an error naming the endpoint and the call, within the call's timeout, and never make
// the client hold more than Options::max_response_bytes, whatever length is announced or
// streamed. No etcd needed.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "launcher/etcd/client.h"

using namespace launch::etcd;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Kind = EtcdError::Kind;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An HTTP server on a kernel-picked port of 127.0.0.1 that serves one connection at a time from
// a thread: reads one request (bounded), hands it to `respond`, closes. Ends with the test.
class FakeServer {
 public:
  // respond(fd, path): writes whatever the case needs to fd; send() counts the bytes.
  using Respond = std::function<void(FakeServer&, int, const std::string&)>;

  explicit FakeServer(Respond respond) : respond_(std::move(respond)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd_, 8) == 0);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
    ::close(listen_fd_);
    ::close(stop_fd_);
  }

  // Sends all of `data`; false once the client has gone (or the test ends).
  bool send(int fd, std::string_view data) {
    while (!data.empty()) {
      pollfd p[2] = {{fd, POLLOUT, 0}, {stop_fd_, POLLIN, 0}};
      if (::poll(p, 2, 10000) <= 0 || p[1].revents) return false;
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes_sent += size_t(n);
      data.remove_prefix(size_t(n));
    }
    return true;
  }
  // Blocks until the test ends (a server that never answers).
  void hang() {
    pollfd p{stop_fd_, POLLIN, 0};
    ::poll(&p, 1, 30000);
  }
  void send_json(int fd, const std::string& body, int status = 200) {
    send(fd, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }
  // What etcd 3.4 says to GET /version, which every client asks first.
  bool answered_version(int fd, const std::string& path) {
    if (path != "/version") return false;
    send_json(fd, R"({"etcdserver":"3.4.23","etcdcluster":"3.4.0"})");
    return true;
  }

  std::string endpoint;
  std::atomic<size_t> bytes_sent{0};

 private:
  void serve() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      if (::poll(p, 2, 30000) <= 0 || p[1].revents) return;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::string path = read_request(fd);
      if (!path.empty()) respond_(*this, fd, path);
      ::close(fd);
    }
  }
  // The request's path once its headers and (Content-Length) body are in; "" if it never came.
  std::string read_request(int fd) {
    std::string req;
    char buf[4096];
    size_t need = std::string::npos;
    while (req.size() < (1 << 20)) {
      size_t head_end = req.find("\r\n\r\n");
      if (head_end != std::string::npos && need == std::string::npos) {
        size_t cl = req.find("Content-Length: ");
        need = head_end + 4 + (cl != std::string::npos && cl < head_end ? std::stoul(req.substr(cl + 16)) : 0);
      }
      if (need != std::string::npos && req.size() >= need) {
        size_t sp = req.find(' ');
        return req.substr(sp + 1, req.find(' ', sp + 1) - sp - 1);
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) return "";
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return "";
      req.append(buf, size_t(n));
    }
    return "";
  }

  Respond respond_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

Options options_for(const FakeServer& s) {
  Options o;
  o.endpoint = s.endpoint;
  o.endpoint_source = "--rdzv-endpoint";
  o.timeout = 2s;
  return o;
}

// The call's error, checked to name the endpoint.
template <class F>
EtcdError error_of(const FakeServer& s, F&& call) {
  try {
    call();
  } catch (const EtcdError& e) {
    CHECK_THAT(e.what(), Catch::Contains("etcd at " + s.endpoint));
    return e;
  }
  FAIL("the call succeeded");
  return EtcdError(Kind::Invalid, "");
}

}  // namespace

TEST_CASE("hostile: an answer that is not JSON, or not etcd's JSON, is a Protocol error", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (f.answered_version(fd, path)) return;
    if (path == "/v3/kv/range") f.send_json(fd, R"({"kvs":"nope"})");
    else f.send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world");
  });
  Client c(options_for(s));
  EtcdError garbage = error_of(s, [&] { c.put("/launch/j/x", "v"); });
  CHECK(garbage.kind() == Kind::Protocol);
  CHECK_THAT(garbage.what(), Catch::Contains("put of '/launch/j/x'") && Catch::Contains("not JSON: 'hello world'") &&
                                 Catch::Contains("check --rdzv-endpoint"));
  EtcdError shape = error_of(s, [&] { c.range("/launch/j/x"); });
  CHECK(shape.kind() == Kind::Protocol);
  CHECK_THAT(shape.what(), Catch::Contains("'kvs' is not an array"));
}

TEST_CASE("hostile: an HTTP error page (a proxy, another service) is a Protocol error quoting it", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string&) {
    f.send(fd, "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 22\r\nConnection: close\r\n\r\n"
               "<h1>nothing here</h1>\n");
  });
  Client c(options_for(s));
  EtcdError e = error_of(s, [&] { c.get("/k"); });
  CHECK(e.kind() == Kind::Protocol);
  CHECK_THAT(e.what(), Catch::Contains("GET /version") && Catch::Contains("HTTP 404") &&
                           Catch::Contains("<h1>nothing here</h1>"));
}

TEST_CASE("hostile: a server speaking another protocol is refused", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string&) { f.send(fd, "SSH-2.0-OpenSSH_9.2\r\n"); });
  Client c(options_for(s));
  EtcdError e = error_of(s, [&] { c.server_version(); });
  CHECK((e.kind() == Kind::Protocol || e.kind() == Kind::Connection));
}

TEST_CASE("hostile: a server that closes without answering is a Connection error", "[etcd][hostile]") {
  FakeServer s([](FakeServer&, int, const std::string&) {});
  Client c(options_for(s));
  EtcdError e = error_of(s, [&] { c.server_version(); });
  CHECK(e.kind() == Kind::Connection);
  CHECK_THAT(e.what(), Catch::Contains("cannot reach etcd at " + s.endpoint + " (GET /version)"));
}

TEST_CASE("hostile: a server that accepts and never answers times out within the call's timeout", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (!f.answered_version(fd, path)) f.hang();
  });
  Options o = options_for(s);
  o.timeout = 700ms;
  Client c(o);
  auto t0 = Clock::now();
  EtcdError e = error_of(s, [&] { c.keep_alive(42); });
  CHECK(e.kind() == Kind::Timeout);
  CHECK_THAT(e.what(), Catch::Contains("did not answer keep-alive of lease 2a"));
  CHECK(since(t0) >= 0.65);
  CHECK(since(t0) < 2);
  t0 = Clock::now();
  // A watch that was never confirmed is the same error, not "nothing changed".
  EtcdError w = error_of(s, [&] { c.wait_for_change("/k", "", 0, 700ms); });
  CHECK(w.kind() == Kind::Timeout);
  CHECK(since(t0) < 2);
}

TEST_CASE("hostile: a 10 GiB Content-Length fails before a byte is kept", "[etcd][hostile][limits]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (f.answered_version(fd, path)) return;
    if (!f.send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\n\r\n")) return;
    const std::string chunk(1 << 20, '{');
    for (int i = 0; i < 64 && f.send(fd, chunk); ++i) {
    }
  });
  Options o = options_for(s);
  o.max_response_bytes = 1 << 20;
  Client c(o);
  EtcdError e = error_of(s, [&] { c.range("/k"); });
  CHECK(e.kind() == Kind::TooLarge);
  CHECK_THAT(e.what(), Catch::Contains("more than 1 MiB") && Catch::Contains("range of '/k'"));
  CHECK(s.bytes_sent < (32u << 20));  // it hung up; the rest of the 64 MiB was never sent
}

TEST_CASE("hostile: an endless chunked answer is cut at max_response_bytes", "[etcd][hostile][limits]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (f.answered_version(fd, path)) return;
    if (!f.send(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    const std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";  // 64 KiB each
    for (int i = 0; i < 4096 && f.send(fd, chunk); ++i) {  // at most 256 MiB
    }
  });
  Options o = options_for(s);
  o.max_response_bytes = 1 << 20;
  o.timeout = 10s;
  Client c(o);
  EtcdError e = error_of(s, [&] { c.range("/k"); });
  CHECK(e.kind() == Kind::TooLarge);
  CHECK(s.bytes_sent < (32u << 20));
}

TEST_CASE("hostile: a watch stream of endless lines without an event is cut too", "[etcd][hostile][limits]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (f.answered_version(fd, path)) return;
    if (!f.send(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    std::string lines;
    while (lines.size() < 0x8000) lines += "{\"result\":{\"created\":true}}\n";
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", lines.size());
    const std::string chunk = head + lines + "\r\n";
    for (int i = 0; i < 8192 && f.send(fd, chunk); ++i) {
    }
  });
  Options o = options_for(s);
  o.max_response_bytes = 1 << 20;
  Client c(o);
  EtcdError e = error_of(s, [&] { c.wait_for_change("/k", "", 0, 10s); });
  CHECK(e.kind() == Kind::TooLarge);
  CHECK_THAT(e.what(), Catch::Contains("watch of '/k'"));
}

TEST_CASE("hostile: a keep-alive stream that ends without its answer is a Protocol error", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string& path) {
    if (!f.answered_version(fd, path)) f.send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  });
  Client c(options_for(s));
  EtcdError e = error_of(s, [&] { c.keep_alive(7); });
  CHECK(e.kind() == Kind::Protocol);
  CHECK_THAT(e.what(), Catch::Contains("ended without an answer"));
}

TEST_CASE("hostile: an etcd too old for the gateway is refused by version", "[etcd][hostile]") {
  FakeServer s([](FakeServer& f, int fd, const std::string&) { f.send_json(fd, R"({"etcdserver":"3.2.26"})"); });
  Client c(options_for(s));
  EtcdError e = error_of(s, [&] { c.put("/k", "v"); });
  CHECK(e.kind() == Kind::Invalid);
  CHECK_THAT(e.what(), Catch::Contains("3.2.26 is too old"));
}
