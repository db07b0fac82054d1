#include "proto/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "proto/codec.h"
#include "proto/protocol.h"
#include "proto/worker_env.h"

namespace proto {

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using Kind = StoreError::Kind;

// How long past a blocking request's own timeout we wait for the server's TIMEOUT reply.
constexpr ms kReplyGrace{2000};

std::string seconds(ms d) {
  long long v = d.count();
  if (v < 1000) return std::to_string(v) + " ms";
  if (v % 1000 == 0) return std::to_string(v / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(v) / 1000.0);
  return buf;
}

std::string quoted(const std::string& k) { return "'" + k + "'"; }

std::string list_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 5; ++i) s += (i ? ", " : "") + quoted(keys[i]);
  if (keys.size() > 5) s += " and " + std::to_string(keys.size() - 5) + " more";
  return (keys.size() == 1 ? "key " : "keys ") + s;
}

ms remaining(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() < 0 ? ms(0) : d;
}

bool blocking_op(Op op) { return op == Op::Get || op == Op::Wait || op == Op::MultiGet; }
// Ops safe to resend after the connection dropped with the request in flight.
bool idempotent(Op op) { return op != Op::Add && op != Op::CompareSet; }

struct ConnectionLost {
  std::string why;
};

}  // namespace

// --- Connection ---
struct Client::Impl {
  ClientOptions opts;
  Limits limits;
  int fd = -1;
  bool hello_pending = false;  // connected; HELLO goes out with the next request
  std::string rbuf;

  explicit Impl(ClientOptions o) : opts(std::move(o)) {}
  ~Impl() { disconnect(); }

  // poll(2) on `s` (ignored when negative) for at most `timeout`, also watching opts.cancel_fd:
  // when that is readable and opts.cancelled() says so, the call ends (StoreError Cancelled).
  // Returns poll's count for `s` (0: timed out).
  int wait_for(int s, short events, ms timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      pollfd p[2] = {{s, events, 0}, {opts.cancel_fd, POLLIN, 0}};
      const nfds_t n = opts.cancel_fd >= 0 ? 2 : 1;
      int pr = ::poll(p, n, static_cast<int>(remaining(deadline).count()));
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return pr;
      if (n == 2 && (p[1].revents & POLLIN) && opts.cancelled && opts.cancelled())
        throw StoreError(Kind::Cancelled, "interrupted while talking to the store at " + opts.address);
      if (p[0].revents) return 1;
      if (remaining(deadline).count() == 0) return 0;
    }
  }

  void disconnect() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    hello_pending = false;
    rbuf.clear();
  }

  // One connection attempt; returns an error text or "" on success.
  std::string try_connect(Clock::time_point deadline) {
    auto colon = opts.address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == opts.address.size())
      throw StoreError(Kind::Invalid, "store address '" + opts.address +
                                          "' is not ip:port; check " + opts.address_source);
    std::string host = opts.address.substr(0, colon);
    std::string port = opts.address.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    // Numeric addresses (what the launcher hands out) skip the resolver and its file reads.
    in_addr v4{};
    in6_addr v6{};
    if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
      hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0)
      throw StoreError(Kind::Invalid, "cannot resolve store address '" + opts.address +
                                          "': " + ::gai_strerror(rc));
    std::string err = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
      int s = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) {
        err = std::strerror(errno);
        continue;
      }
      int r = ::connect(s, a->ai_addr, a->ai_addrlen);
      if (r < 0 && errno == EINPROGRESS) {
        int pr;
        try {
          pr = wait_for(s, POLLOUT, remaining(deadline));
        } catch (...) {
          ::close(s);
          ::freeaddrinfo(res);
          throw;
        }
        int so = 0;
        socklen_t len = sizeof so;
        if (pr == 0) {
          so = ETIMEDOUT;
        } else {
          ::getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &len);
        }
        r = so == 0 ? 0 : -1;
        errno = so;
      }
      if (r == 0) {
        int one = 1;
        ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd = s;
        ::freeaddrinfo(res);
        return "";
      }
      err = std::strerror(errno);
      ::close(s);
    }
    ::freeaddrinfo(res);
    return err;
  }

  void send_all(const std::string& frame, Clock::time_point deadline) {
    size_t off = 0;
    while (off < frame.size()) {
      ssize_t n = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        int pr = wait_for(fd, POLLOUT, remaining(deadline));
        if (pr == 0) throw StoreError(Kind::Timeout, "timed out sending to the store at " + opts.address);
        continue;
      }
      throw ConnectionLost{std::strerror(errno)};
    }
  }

  Reply read_reply(Op op, Clock::time_point deadline) {
    char buf[65536];
    for (;;) {
      if (!rbuf.empty()) {
        Decoded<Reply> d = decode_reply(rbuf, limits);
        if (d.state == Parse::Error)
          throw StoreError(Kind::Protocol, "bad reply from the store at " + opts.address + ": " + d.message);
        if (d.state == Parse::Ok) {
          rbuf.erase(0, d.consumed);
          return std::move(d.value);
        }
      }
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        rbuf.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) throw ConnectionLost{"the store closed the connection"};
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) throw ConnectionLost{std::strerror(errno)};
      ms left = remaining(deadline);
      if (left.count() == 0)
        throw StoreError(Kind::Timeout, "no reply from the store at " + opts.address + " to " +
                                            std::string(op_name(op)));
      wait_for(fd, POLLIN, left);
    }
  }

  // Connects, retrying refused/unreachable connections until the deadline. The HELLO is not
  // sent here: call() sends it in the same write as the first request (one round trip less
  // per connection; a refused HELLO makes the server drop what follows unread).
  void ensure_connected(Clock::time_point deadline) {
    if (fd >= 0) return;
    auto connect_deadline = std::min(deadline, Clock::now() + opts.connect_timeout);
    ms backoff{10};
    for (;;) {
      std::string last = try_connect(connect_deadline);
      if (last.empty()) {
        hello_pending = true;
        return;
      }
      ms left = remaining(connect_deadline);
      if (left.count() == 0 || !opts.retry_connect)
        throw StoreError(Kind::Connection, "could not reach the store at " + opts.address + ": " + last +
                                               " (is the launcher running? check " + opts.address_source + ")");
      // Backoff between attempts, not synchronisation: the launcher may still be starting.
      wait_for(-1, 0, std::min(backoff, left));
      backoff = std::min(backoff * 2, ms(500));
    }
  }

  std::string hello_frame() const {
    Request hello;
    hello.op = Op::Hello;
    hello.job_id = opts.job_id;
    hello.token = opts.token;
    hello.client_name = opts.client_name;
    return encode_request(hello);
  }

  // Sends `req` and returns the reply, reconnecting (and resending idempotent requests) when
  // the connection drops, until `deadline`. Blocking requests carry the time that remains.
  // With may_block false a GET/WAIT/MULTI_GET asks the server not to park (timeout 0).
  Reply call(Request req, Clock::time_point deadline, bool may_block = true) {
    for (;;) {
      ensure_connected(deadline);
      bool sent = false;
      try {
        bool parks = blocking_op(req.op) && may_block;
        req.timeout_ms = parks ? static_cast<uint64_t>(remaining(deadline).count()) : 0;
        std::string frame = hello_pending ? hello_frame() + encode_request(req) : encode_request(req);
        send_all(frame, deadline);
        sent = true;
        if (hello_pending) {
          Reply h = read_reply(Op::Hello, deadline);
          if (h.status != Status::Ok) {
            disconnect();
            throw StoreError(Kind::Refused, "the store at " + opts.address + " refused this client (" +
                                                std::string(status_name(h.status)) + "): " + h.message);
          }
          hello_pending = false;
        }
        return read_reply(req.op, parks ? deadline + kReplyGrace : deadline);
      } catch (const ConnectionLost& e) {
        disconnect();
        if (sent && !idempotent(req.op))
          throw StoreError(Kind::Connection, "lost the connection to the store at " + opts.address +
                                                 " during " + std::string(op_name(req.op)) + " of key " +
                                                 quoted(req.key) + " (" + e.why +
                                                 "); it may or may not have been applied");
        if (remaining(deadline).count() == 0)
          throw StoreError(Kind::Connection, "lost the connection to the store at " + opts.address +
                                                 ": " + e.why);
      }
    }
  }

  void check_key(const std::string& key) const {
    if (key.size() > limits.max_key)
      throw StoreError(Kind::Invalid, "key of " + std::to_string(key.size()) +
                                          " bytes exceeds the limit of " + std::to_string(limits.max_key));
  }
};

// --- Status -> error ---
namespace {

[[noreturn]] void raise(const Reply& r, const std::string& what, ms timeout) {
  switch (r.status) {
    case Status::Timeout:
      throw StoreError(Kind::Timeout, "waited " + seconds(timeout) + " for " + what + "; still " + r.message);
    case Status::JobFailed:
      throw StoreError(Kind::JobFailed, "job failed while waiting for " + what + ": " + r.message);
    case Status::BadVersion:
    case Status::BadJob:
    case Status::BadToken:
    case Status::NotAuthenticated:
      throw StoreError(Kind::Refused, "store refused " + what + " (" + std::string(status_name(r.status)) +
                                          "): " + r.message);
    case Status::TooLarge:
    case Status::NotInteger:
    case Status::ReservedKey:
    case Status::QuotaExceeded:
      throw StoreError(Kind::Invalid, "store rejected " + what + " (" + std::string(status_name(r.status)) +
                                          "): " + r.message);
    default:
      throw StoreError(Kind::Protocol, "store answered " + std::string(status_name(r.status)) + " to " +
                                           what + ": " + r.message);
  }
}

Clock::time_point after(ms t) { return Clock::now() + t; }

}  // namespace

// --- Client ---
Client Client::from_env(const WorkerEnv& env, ms connect_timeout) {
  auto need = [](const std::optional<std::string>& v, const char* name) {
    if (!v)
      throw StoreError(Kind::Invalid, std::string(name) +
                                          " is not set; run this under `launch`, which sets it for every worker");
    return *v;
  };
  ClientOptions o;
  o.address = need(env.store_addr, env::kStoreAddr);
  o.token = need(env.store_token, env::kStoreToken);
  o.job_id = env.job_id;
  o.client_name = env.contract == Contract::None ? "pid " + std::to_string(::getpid()) : env.who();
  o.connect_timeout = connect_timeout;
  return Client(std::move(o));
}

const ClientOptions& Client::options() const { return impl_->opts; }

Client::Client(ClientOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

void Client::set(const std::string& key, std::string_view value, ms timeout) {
  impl_->check_key(key);
  Request q;
  q.op = Op::Set;
  q.key = key;
  q.value = std::string(value);
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "SET of key " + quoted(key), timeout);
}

std::string Client::get(const std::string& key, ms timeout, const std::string& writer) {
  impl_->check_key(key);
  Request q;
  q.op = Op::Get;
  q.key = key;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok)
    raise(r, "key " + quoted(key) + (writer.empty() ? "" : " (written by " + writer + ")"), timeout);
  return std::move(r.value);
}

int64_t Client::add(const std::string& key, int64_t delta, ms timeout) {
  impl_->check_key(key);
  Request q;
  q.op = Op::Add;
  q.key = key;
  q.delta = delta;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "ADD to key " + quoted(key), timeout);
  return r.number;
}

std::vector<bool> Client::check(const std::vector<std::string>& keys, ms timeout) {
  for (const auto& k : keys) impl_->check_key(k);
  Request q;
  q.op = Op::Check;
  q.keys = keys;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "CHECK of " + list_keys(keys), timeout);
  if (r.present.size() != keys.size())
    throw StoreError(Kind::Protocol, "CHECK reply has " + std::to_string(r.present.size()) +
                                         " flags for " + std::to_string(keys.size()) + " keys");
  return std::vector<bool>(r.present.begin(), r.present.end());
}

void Client::wait(const std::vector<std::string>& keys, ms timeout) {
  for (const auto& k : keys) impl_->check_key(k);
  Request q;
  q.op = Op::Wait;
  q.keys = keys;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, list_keys(keys), timeout);
}

std::vector<std::string> Client::multi_get(const std::vector<std::string>& keys, ms timeout) {
  for (const auto& k : keys) impl_->check_key(k);
  Request q;
  q.op = Op::MultiGet;
  q.keys = keys;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, list_keys(keys), timeout);
  if (r.values.size() != keys.size())
    throw StoreError(Kind::Protocol, "MULTI_GET reply has " + std::to_string(r.values.size()) +
                                         " values for " + std::to_string(keys.size()) + " keys");
  return std::move(r.values);
}

bool Client::del(const std::string& key, ms timeout) {
  impl_->check_key(key);
  Request q;
  q.op = Op::Delete;
  q.key = key;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "DELETE of key " + quoted(key), timeout);
  return r.existed;
}

std::string Client::compare_set(const std::string& key, std::string_view expected,
                                std::string_view desired, ms timeout) {
  impl_->check_key(key);
  Request q;
  q.op = Op::CompareSet;
  q.key = key;
  q.value = std::string(expected);
  q.desired = std::string(desired);
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "COMPARE_SET of key " + quoted(key), timeout);
  return std::move(r.value);
}

void Client::ping(ms timeout) {
  Request q;
  q.op = Op::Ping;
  Reply r = impl_->call(std::move(q), after(timeout));
  if (r.status != Status::Ok) raise(r, "PING", timeout);
}

// Counter + one "done" key per generation, so a barrier name can be reused: the arrival that
// completes generation g (count == (g+1)*world) publishes done/g, which the others WAIT for.
void Client::barrier(const std::string& name, int world, ms timeout) {
  if (world < 1) throw StoreError(Kind::Invalid, "barrier '" + name + "' needs a world size >= 1");
  auto deadline = after(timeout);
  const std::string count_key = "barrier/" + name + "/count";
  int64_t n = add(count_key, 1, timeout);
  int64_t gen = (n - 1) / world;
  const std::string done_key = "barrier/" + name + "/done/" + std::to_string(gen);
  if (n % world == 0) set(done_key, "1", std::max(remaining(deadline), ms(1000)));
  Request q;
  q.op = Op::Wait;
  q.keys = {done_key};
  Reply r = impl_->call(std::move(q), deadline);
  if (r.status == Status::Ok) return;
  std::string what = "barrier '" + name + "' of " + std::to_string(world) + " ranks";
  if (r.status == Status::Timeout) {
    std::string arrived;
    try {
      Request g;
      g.op = Op::Get;
      g.key = count_key;
      Reply c = impl_->call(std::move(g), after(ms(2000)), false);
      if (c.status == Status::Ok)
        arrived = " (" + std::to_string(std::strtoll(c.value.c_str(), nullptr, 10) - gen * world) +
                  " arrived)";
    } catch (const StoreError&) {
    }
    throw StoreError(Kind::Timeout, "waited " + seconds(timeout) + " at " + what + arrived);
  }
  raise(r, what, timeout);
}

std::optional<std::string> Client::job_failure(ms timeout) {
  Request q;
  q.op = Op::Get;
  q.key = std::string(kJobFailedKey);
  // GET with a zero server-side timeout answers at once: the record, or TIMEOUT if none.
  Reply r = impl_->call(std::move(q), after(timeout), false);
  if (r.status == Status::Ok) return std::move(r.value);
  if (r.status == Status::Timeout) return std::nullopt;
  raise(r, "the job failure record", timeout);
}

}  // namespace proto
