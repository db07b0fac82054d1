// The store's I/O shell: one epoll loop on one thread around proto::KvState. Everything here
// is sockets and buffers; every decision about keys is the state machine's.
#include "store/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/log_throttle.h"
#include "proto/address.h"
#include "proto/codec.h"
#include "proto/kv_state.h"

namespace store {

namespace {

using proto::Clock;
using proto::ClientId;
using std::chrono::milliseconds;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kEventId = 1;
constexpr size_t kReadChunk = 65536;
// Pipelined bytes buffered beyond the frame being assembled; past this we stop reading.
constexpr size_t kReadSlack = 1u << 20;
// Unsent reply bytes past which a connection's further requests wait (a client that does not
// read its replies cannot make the store buffer without bound).
constexpr size_t kWriteCap = 4u << 20;
// What an unauthenticated connection costs besides its buffers (the Conn, its map entries, the
// peer's name), charged against StoreServerConfig::preauth_budget.
constexpr size_t kConnCharge = 1024;
// After a final error reply, input is read and discarded until the peer hangs up, so that the
// peer reads the reply before our close resets the connection -- up to this much: a client
// that goes on sending (the 128 MiB of a refused frame) is cut off.
constexpr size_t kDrainLimit = 1u << 20;
// Lines about refused or broken connections: a burst of 10, then one a second (strangers must
// not be able to flood the launcher's log); the count held back is logged.
constexpr size_t kWarnBurst = 10;
constexpr std::chrono::milliseconds kWarnInterval{1000};

std::string errno_text() { return std::strerror(errno); }

// Client-chosen text on its way into our log: no control characters (no forged log lines).
std::string printable(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return s;
}

std::string peer_name(const sockaddr_storage& ss) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof ss, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + serv
                                  : std::string(host) + ":" + serv;
}

struct Conn {
  int fd = -1;
  ClientId id = 0;
  std::string peer;
  std::string name;  // from HELLO, for the log
  bool authed = false;
  std::string rbuf;
  size_t rpos = 0;  // bytes of rbuf already consumed
  std::string wbuf;
  size_t wpos = 0;
  uint32_t events = 0;  // epoll interest currently registered
  Clock::time_point connected_at;
  bool partial = false;  // a frame has started arriving but is not complete
  Clock::time_point last_progress;  // of the partial frame: stalled when this is too old
  bool closing = false;  // refused: flush the final reply, shut down, drain, close
  bool shut_wr = false;
  Clock::time_point closing_since;
  size_t drained = 0;  // input discarded since the final reply
  size_t charged = 0;  // bytes of the pre-authentication budget this connection holds

  size_t unread() const { return rbuf.size() - rpos; }
  size_t unsent() const { return wbuf.size() - wpos; }
  std::string who() const { return name.empty() ? peer : peer + " (" + name + ")"; }
};

class EpollStore final : public StoreServer {
 public:
  explicit EpollStore(const StoreServerConfig& cfg) : cfg_(cfg), state_(cfg.limits) {
    listen_on(cfg.host, cfg.port);
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    evfd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd_ < 0 || evfd_ < 0) {
      int e = errno;
      cleanup_fds();
      throw std::runtime_error("store: cannot create epoll/eventfd: " + std::string(std::strerror(e)));
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    add_fd(listen_fd_, kListenId, EPOLLIN);
    add_fd(evfd_, kEventId, EPOLLIN);
    spdlog::info("store: listening on {} for job '{}'", address_, cfg.job_id);
    thread_ = std::thread([this] { run(); });
  }

  ~EpollStore() override {
    stop_.store(true);
    wake();
    if (thread_.joinable()) thread_.join();
    if (size_t held = warn_throttle_.take_held())
      spdlog::warn("store: {} more line(s) about closed connections not logged one by one", held);
    for (auto& [id, c] : conns_) ::close(c->fd);
    conns_.clear();
    cleanup_fds();
  }

  std::string address() const override { return address_; }
  size_t connection_count() const override { return stat_conns_.load(); }
  size_t parked_waiters() const override { return stat_parked_.load(); }

  void report_failure(int rank, const std::string& description) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_requested_) return;  // the first call wins
      failure_requested_ = true;
      failure_record_ = "rank " + std::to_string(rank) + ": " + description;
    }
    wake();
  }

 private:
  // --- Setup ---
  void listen_on(const std::string& host, uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string where = proto::join_host_port(host, port);
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0)
      throw std::runtime_error("store: cannot resolve listen address " + where + ": " + ::gai_strerror(rc));
    int err = EADDRNOTAVAIL;
    for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
      int s = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) {
        err = errno;
        continue;
      }
      int one = 1;
      ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s, SOMAXCONN) == 0) {
        listen_fd_ = s;
        break;
      }
      err = errno;
      ::close(s);
    }
    ::freeaddrinfo(res);
    // The caller knows which option named the address; the store does not.
    if (listen_fd_ < 0) throw ListenError("store: cannot listen on " + where + ": " + std::strerror(err), err);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    address_ = peer_name(ss);
  }

  void cleanup_fds() {
    for (int* fd : {&listen_fd_, &epfd_, &evfd_, &spare_fd_})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

  void add_fd(int fd, uint64_t id, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }

  void wake() {
    uint64_t one = 1;
    ssize_t n = ::write(evfd_, &one, sizeof one);
    (void)n;  // a full counter already means "wake up"
  }

  // --- The loop ---
  void run() {
    std::vector<epoll_event> events(512);
    auto next_sweep = Clock::now() + cfg_.sweep_interval;
    while (!stop_.load()) {
      auto now = Clock::now();
      auto until = next_sweep;
      if (auto d = state_.next_deadline()) until = std::min(until, *d);
      if (listen_paused_) {
        if (now >= listen_resume_) resume_listening();
        else until = std::min(until, listen_resume_);
      }
      auto wait_ms = std::chrono::duration_cast<milliseconds>(until - now).count();
      int timeout = wait_ms <= 0 ? 0 : static_cast<int>(std::min<long long>(wait_ms + 1, 1000));
      int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) {
        spdlog::error("store: epoll_wait failed: {}; the store stops", errno_text());
        return;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kListenId) {
          accept_all();
        } else if (id == kEventId) {
          uint64_t v;
          ssize_t r = ::read(evfd_, &v, sizeof v);
          (void)r;
          take_failure();
        } else {
          on_conn_event(id, events[i].events);
        }
      }
      now = Clock::now();
      state_.expire(now, out_);
      deliver();
      settle();
      if (now >= next_sweep) {
        sweep(now);
        next_sweep = now + cfg_.sweep_interval;
      }
      stat_conns_.store(conns_.size());
      stat_parked_.store(state_.parked_count());
    }
  }

  void take_failure() {
    std::string record;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_requested_ || failure_taken_) return;
      failure_taken_ = true;
      record = failure_record_;
    }
    size_t parked = state_.parked_count();
    if (state_.fail_job(record, out_))
      spdlog::warn("store: job failed ({}); waking {} waiting client(s)", record, parked);
    deliver();
    settle();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          shed_one();
          if (listen_paused_) return;
          continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          spdlog::warn("store: accept failed: {}", errno_text());
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->id = next_id_++;
      c->peer = peer_name(ss);
      c->connected_at = Clock::now();
      c->events = EPOLLIN;
      add_fd(fd, c->id, EPOLLIN);
      const uint64_t id = c->id;
      Conn& conn = *c;
      conns_.emplace(id, std::move(c));
      preauth_.insert(id);
      make_room(id, kConnCharge);
      account(conn);
    }
  }

  // Out of file descriptors: the pending connection would make the level-triggered listener
  // fire forever. Accept it on the spare descriptor and close it at once; its client sees the
  // connection drop and retries, and the store keeps serving the connections it has.
  void shed_one() {
    auto now = Clock::now();
    if (now - last_shed_warning_ > std::chrono::seconds(1)) {
      spdlog::warn("store: out of file descriptors with {} connections; refusing new ones "
                   "(raise `ulimit -n` for jobs this large)", conns_.size());
      last_shed_warning_ = now;
    }
    if (spare_fd_ >= 0) ::close(spare_fd_);
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) ::close(fd);
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    // No spare either (another thread of the process took it): stop listening for a moment
    // rather than spin on a listener we cannot serve.
    if (fd < 0 || spare_fd_ < 0) pause_listening(now + std::chrono::milliseconds(100));
  }

  void pause_listening(Clock::time_point until) {
    if (!listen_paused_) {
      epoll_event ev{};
      ev.data.u64 = kListenId;
      ::epoll_ctl(epfd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    }
    listen_paused_ = true;
    listen_resume_ = until;
  }

  void resume_listening() {
    if (!listen_paused_) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    listen_paused_ = false;
  }

  // --- One connection ---
  void on_conn_event(uint64_t id, uint32_t ev) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
      if (!read_some(c)) return;
      // A hang-up we did not read to the end (input buffer full): nothing more will come.
      if (ev & (EPOLLHUP | EPOLLERR)) {
        close_conn(c, "hung up", false);
        return;
      }
    }
    dirty_.push_back(id);
    settle();
  }

  // Reads what is available (bounded); returns false if the connection was closed.
  bool read_some(Conn& c) {
    if (c.closing) return drain(c);
    for (;;) {
      if (c.rpos > 0 && c.rpos == c.rbuf.size()) {
        release(c.rbuf);
        c.rpos = 0;
      }
      const size_t allowed = read_allowance(c);
      if (allowed == 0) return true;
      if (!c.authed) {
        // At most the rest of one HELLO, received straight into a buffer of that size.
        make_room(c.id, allowed);
        if (c.rbuf.capacity() < c.rbuf.size() + allowed) c.rbuf.reserve(c.rbuf.size() + allowed);
      }
      ssize_t n = ::recv(c.fd, chunk_, std::min(allowed, sizeof chunk_), 0);
      if (n > 0) {
        c.rbuf.append(chunk_, static_cast<size_t>(n));
        c.last_progress = Clock::now();
        account(c);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      std::string why = n == 0 ? "closed the connection" : errno_text();
      if (c.partial)
        close_conn(c, "disconnected mid-frame: " + why, true);
      else if (state_.parked(c.id))
        close_conn(c, "disconnected while waiting: " + why, false);
      else
        close_conn(c, why, false);
      return false;
    }
  }

  // After the final error reply: discard input until the peer hangs up, so that closing
  // with unread bytes does not reset the connection before the peer has read the reply.
  bool drain(Conn& c) {
    for (;;) {
      ssize_t n = ::recv(c.fd, chunk_, sizeof chunk_, 0);
      if (n > 0) {
        c.drained += static_cast<size_t>(n);
        if (c.drained <= kDrainLimit) continue;
        close_conn(c, "went on sending after its final error reply", false);  // refusal logged already
        return false;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close_conn(c, "", false);
      return false;
    }
  }

  // How much more input to take now. Authenticated: room for the frame being assembled plus
  // bounded pipelining (a chunk at a time). Not yet: exactly the rest of the HELLO, whose size
  // the header bounds; nothing behind it is read before the HELLO is accepted.
  size_t read_allowance(const Conn& c) const {
    if (c.closing) return sizeof chunk_;  // drained and discarded
    const std::string_view buf = std::string_view(c.rbuf).substr(c.rpos);
    if (!c.authed) return proto::hello_bytes_wanted(buf, cfg_.limits);
    size_t need = kReadSlack;
    auto h = proto::parse_header(buf, cfg_.limits, true);
    if (h.state == proto::Parse::Ok) need += proto::kHeaderSize + h.value.payload_len;
    return c.unread() < need ? sizeof chunk_ : 0;
  }
  bool wants_read(const Conn& c) const { return read_allowance(c) > 0; }

  // --- The pre-authentication budget ---
  size_t charge(const Conn& c) const {
    return c.authed ? 0 : kConnCharge + c.rbuf.capacity() + c.wbuf.capacity();
  }
  void account(Conn& c) {
    const size_t now = charge(c);
    preauth_bytes_ = preauth_bytes_ - c.charged + now;
    c.charged = now;
  }
  // Closes the oldest unauthenticated connections other than `keep` until `extra` more bytes
  // fit. The oldest is the nearest to its HELLO deadline; a worker's HELLO arrives within
  // moments of connecting, so it is read before its connection could become the oldest.
  void make_room(uint64_t keep, size_t extra) {
    while (preauth_bytes_ + extra > cfg_.preauth_budget) {
      auto it = preauth_.begin();
      if (it != preauth_.end() && *it == keep) ++it;
      if (it == preauth_.end()) return;
      auto victim = conns_.find(*it);
      if (victim == conns_.end()) {
        preauth_.erase(it);
        continue;
      }
      close_conn(*victim->second,
                 "not authenticated, and " + std::to_string(preauth_.size()) +
                     " connection(s) without HELLO fill the budget of " +
                     std::to_string(cfg_.preauth_budget) + " bytes: closing the oldest",
                 true);
    }
  }
  void warn_conn(const std::string& msg) {
    if (auto line = warn_throttle_.admit(msg, Clock::now())) spdlog::warn("{}", *line);
  }

  // Decodes and handles complete frames while the client is not parked.
  void process(Conn& c) {
    while (!c.closing && !state_.parked(c.id) && c.unsent() < kWriteCap) {
      std::string_view buf = std::string_view(c.rbuf).substr(c.rpos);
      if (c.authed && serve_memoised(c, buf)) continue;
      // Before authentication only a HELLO of HELLO's size is decoded: any other first frame,
      // or a longer one, is refused from its header (nothing is buffered for it).
      auto d = c.authed ? proto::decode_request(buf, cfg_.limits) : proto::decode_hello(buf, cfg_.limits);
      if (d.state == proto::Parse::NeedMore) {
        c.partial = !buf.empty();
        return;
      }
      if (d.state == proto::Parse::Error) {
        // Before HELLO, a refusal from a readable header answers that header's op (value.op);
        // a frame that could not be decoded at all is answered as PING.
        const proto::Op op = c.authed ? proto::Op::Ping : d.value.op;
        refuse(c, op, proto::Reply::error(d.error, d.message),
               std::string(c.authed ? "" : "before HELLO, ") + std::string(proto::status_name(d.error)) +
                   ": " + d.message);
        return;
      }
      const std::string_view payload = buf.substr(proto::kHeaderSize, d.consumed - proto::kHeaderSize);
      c.rpos += d.consumed;
      c.partial = false;
      proto::Request& req = d.value;
      if (!c.authed) {
        proto::Reply r = proto::check_hello(req, cfg_.job_id, cfg_.token);
        c.name = printable(req.client_name.substr(0, 64));
        if (r.status != proto::Status::Ok) {
          std::string why = std::string(proto::status_name(r.status)) + ": " + r.message;
          refuse(c, req.op, std::move(r), "handshake refused, " + why);
          return;
        }
        c.authed = true;
        preauth_.erase(c.id);
        account(c);
        proto::append_reply(c.wbuf, proto::Op::Hello, proto::Reply{});
        if (cfg_.on_client) cfg_.on_client(c.name, true);
        continue;
      }
      state_.handle(c.id, req, Clock::now(), out_);
      if (req.op == proto::Op::MultiGet) memoise(c.id, payload);
      deliver();
    }
  }

  // --- MULTI_GET memo ---
  // In an all-gather every rank asks for the same N keys: the answer is encoded once and
  // copied to each asker while no value has changed (N^2 work becomes N^2 bytes copied).
  bool serve_memoised(Conn& c, std::string_view buf) {
    if (memo_frame_.empty() || memo_generation_ != state_.generation()) return false;
    if (buf.size() < proto::kHeaderSize + memo_request_.size()) return false;
    if (static_cast<uint8_t>(buf[5]) != static_cast<uint8_t>(proto::Op::MultiGet)) return false;
    auto h = proto::parse_header(buf, cfg_.limits, true);
    if (h.state != proto::Parse::Ok || h.value.payload_len != memo_request_.size()) return false;
    // The timeout (first 8 payload bytes) differs between askers and does not matter: the
    // memo holds only answers given at once.
    std::string_view keys = buf.substr(proto::kHeaderSize + 8, memo_request_.size() - 8);
    if (keys != std::string_view(memo_request_).substr(8)) return false;
    c.rpos += proto::kHeaderSize + memo_request_.size();
    c.partial = false;
    // Straight from the memo to the socket; only what the socket does not take is copied.
    size_t sent = 0;
    if (c.unsent() == 0) {
      ssize_t n = ::send(c.fd, memo_frame_.data(), memo_frame_.size(), MSG_NOSIGNAL);
      if (n > 0) sent = static_cast<size_t>(n);
    }
    c.wbuf.append(memo_frame_, sent, std::string::npos);
    return true;
  }

  void memoise(ClientId id, std::string_view payload) {
    if (out_.size() != 1 || out_[0].client != id || out_[0].reply.status != proto::Status::Ok) return;
    if (payload.size() < 8 + 4 * 64) return;  // small requests are cheap to answer anyway
    memo_request_.assign(payload.data(), payload.size());
    memo_frame_.clear();
    proto::append_reply(memo_frame_, proto::Op::MultiGet, out_[0].reply);
    memo_generation_ = state_.generation();
  }

  // Queues a final error reply, logs why, and closes once it is sent.
  void refuse(Conn& c, proto::Op op, const proto::Reply& r, const std::string& why) {
    warn_conn("store: closing connection from " + c.who() + ": " + why);
    proto::append_reply(c.wbuf, op, r);
    c.closing = true;
    c.closing_since = Clock::now();
    release(c.rbuf);
    c.rpos = 0;
    state_.drop_client(c.id);
    account(c);
  }

  // Appends the state machine's replies to their connections' write buffers.
  void deliver() {
    for (auto& o : out_) {
      auto it = conns_.find(o.client);
      if (it == conns_.end()) continue;
      proto::append_reply(it->second->wbuf, o.op, o.reply);
      dirty_.push_back(o.client);
    }
    out_.clear();
  }

  // Flushes, processes and re-arms every connection touched, until nothing changes.
  void settle() {
    while (!dirty_.empty()) {
      uint64_t id = dirty_.front();
      dirty_.pop_front();
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      if (!flush(c)) continue;
      process(c);
      if (!flush(c)) continue;
      if (c.closing && c.unsent() == 0 && !c.shut_wr) {
        ::shutdown(c.fd, SHUT_WR);  // the reply is out; the peer sees EOF after it
        c.shut_wr = true;
      }
      rearm(c);
    }
  }

  bool flush(Conn& c) {
    while (c.unsent() > 0) {
      ssize_t n = ::send(c.fd, c.wbuf.data() + c.wpos, c.unsent(), MSG_NOSIGNAL);
      if (n > 0) {
        c.wpos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c, "send failed: " + errno_text(), false);
      return false;
    }
    if (c.wpos == c.wbuf.size()) {
      release(c.wbuf);
      c.wpos = 0;
    } else if (c.wpos > (1u << 20)) {
      c.wbuf.erase(0, c.wpos);
      c.wpos = 0;
    }
    return true;
  }

  // Empties a buffer, giving back its memory if a large frame grew it: thousands of idle
  // connections must not each keep the capacity of the biggest frame they ever saw.
  static void release(std::string& buf) {
    if (buf.capacity() > kReadChunk)
      std::string().swap(buf);
    else
      buf.clear();
  }

  void rearm(Conn& c) {
    uint32_t want = (wants_read(c) ? EPOLLIN : 0u) | (c.unsent() > 0 ? EPOLLOUT : 0u);
    if (want == c.events) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c.id;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = want;
  }

  void close_conn(Conn& c, const std::string& why, bool warn) {
    if (!why.empty()) {
      if (warn)
        warn_conn("store: closing connection from " + c.who() + ": " + why);
      else
        spdlog::debug("store: connection from {} ended: {}", c.who(), why);
    }
    preauth_bytes_ -= c.charged;
    preauth_.erase(c.id);
    state_.drop_client(c.id);
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    if (c.authed && cfg_.on_client) cfg_.on_client(c.name, false);
    conns_.erase(c.id);  // c is gone after this line
  }

  // Closes connections that never authenticated, stalled mid-frame, or will not take their
  // final error reply.
  void sweep(Clock::time_point now) {
    std::vector<std::pair<uint64_t, std::string>> victims;
    for (auto& [id, cp] : conns_) {
      Conn& c = *cp;
      if (c.closing && now - c.closing_since > cfg_.stall_timeout)
        victims.emplace_back(id, "did not hang up after its final error reply");
      else if (c.partial && now - c.last_progress > cfg_.stall_timeout)
        victims.emplace_back(id, "sent part of a frame, then nothing for " +
                                     std::to_string(cfg_.stall_timeout.count()) + " ms");
      else if (!c.authed && !c.closing && now - c.connected_at > cfg_.hello_timeout)
        victims.emplace_back(id, "completed no HELLO within " + std::to_string(cfg_.hello_timeout.count()) + " ms");
    }
    for (auto& [id, why] : victims) close_conn(*conns_.at(id), why, true);
    if (auto line = warn_throttle_.flush("line(s) about closed connections", now)) spdlog::warn("store: {}", *line);
  }

  StoreServerConfig cfg_;
  proto::KvState state_;
  std::string address_;
  int listen_fd_ = -1;
  int epfd_ = -1;
  int evfd_ = -1;
  int spare_fd_ = -1;  // given up to accept-and-close when descriptors run out
  bool listen_paused_ = false;
  Clock::time_point listen_resume_{};
  Clock::time_point last_shed_warning_{};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> stat_conns_{0};
  std::atomic<size_t> stat_parked_{0};
  std::mutex mu_;
  bool failure_requested_ = false;
  bool failure_taken_ = false;
  std::string failure_record_;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = 2;
  std::vector<proto::Outgoing> out_;
  char chunk_[kReadChunk];  // the loop's receive buffer (one thread, one buffer)
  std::string memo_request_;  // payload of the memoised MULTI_GET
  std::string memo_frame_;    // its encoded reply
  uint64_t memo_generation_ = 0;
  std::deque<uint64_t> dirty_;
  // Connections that have not completed HELLO, oldest (lowest id) first, and what they hold.
  std::set<uint64_t> preauth_;
  size_t preauth_bytes_ = 0;
  LogThrottle warn_throttle_{kWarnBurst, kWarnInterval};
};

}  // namespace

std::unique_ptr<StoreServer> StoreServer::start(const StoreServerConfig& cfg) {
  return std::make_unique<EpollStore>(cfg);
}

}  // namespace store
