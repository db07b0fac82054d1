// Store benchmark (scripts/bench_store.sh): rendezvous time for N clients and GET/SET request
// rates, against an in-process server over loopback. Clients are threads, one connection each.
//   store_bench rendezvous N [RUNS]   connect+auth, SET own key, barrier, MULTI_GET all N keys;
//                                     one thread per client (proto::Client)
//   store_bench mux N [RUNS]          the same, N non-blocking connections on 2 threads
//   store_bench rate CLIENTS SECONDS  SET then GET requests per second
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/store_server.h"
#include "proto/client.h"
#include "proto/codec.h"
#include "proto/token.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Releases every waiting thread at once, so the timed section excludes thread creation.
class StartGate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

struct Store {
  store::StoreServerConfig cfg;
  std::unique_ptr<store::StoreServer> server;
  Store() {
    cfg.job_id = "bench";
    cfg.token = proto::generate_token();
    server = store::StoreServer::start(cfg);
  }
  proto::ClientOptions options(int i) const {
    proto::ClientOptions o;
    o.address = server->address();
    o.job_id = cfg.job_id;
    o.token = cfg.token;
    o.client_name = "bench " + std::to_string(i);
    return o;
  }
};

// --- Rendezvous ---
// Per phase, when the slowest client finished it (seconds after the start).
struct Phases {
  double set = 0, barrier = 0, multi_get = 0;
};

double rendezvous_once(int n, Phases& phases) {
  Store store;
  StartGate gate;
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex err_mu;
  std::vector<std::thread> threads;
  std::vector<Clock::time_point> t_set(n), t_barrier(n), t_get(n);
  threads.reserve(n);
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      gate.wait();
      try {
        proto::Client c(store.options(i));
        c.set("peer/" + std::to_string(i), "127.0.0.1:" + std::to_string(20000 + i), 60s);
        t_set[i] = Clock::now();
        c.barrier("rendezvous", n, 120s);
        t_barrier[i] = Clock::now();
        std::vector<std::string> keys;
        keys.reserve(n);
        for (int j = 0; j < n; ++j) keys.push_back("peer/" + std::to_string(j));
        auto values = c.multi_get(keys, 60s);
        if (values[(i + 1) % n] != "127.0.0.1:" + std::to_string(20000 + (i + 1) % n))
          throw std::runtime_error("wrong value");
        t_get[i] = Clock::now();
      } catch (const std::exception& e) {
        ++failures;
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.empty()) first_error = e.what();
      }
    });
  auto t0 = Clock::now();
  gate.open();
  for (auto& t : threads) t.join();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  auto last = [&](const std::vector<Clock::time_point>& v) {
    return std::chrono::duration<double>(*std::max_element(v.begin(), v.end()) - t0).count();
  };
  phases = Phases{last(t_set), last(t_barrier), last(t_get)};
  if (failures) throw std::runtime_error(std::to_string(failures.load()) + " clients failed: " + first_error);
  return s;
}

// --- Rendezvous, multiplexed ---
// The same rendezvous, with each of `drivers` threads running N/drivers non-blocking
// connections through the codec: measures the store rather than the scheduling of N threads
// on a small machine. Per connection: HELLO+SET+ADD (pipelined), [SET done +] WAIT, MULTI_GET.
class MuxDriver {
 public:
  MuxDriver(const Store& store, int n, int first, int step) : store_(store), n_(n) {
    for (int i = first; i < n; i += step) {
      conns_.emplace_back();
      conns_.back().index = i;
    }
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    proto::Request mget;
    mget.op = proto::Op::MultiGet;
    mget.timeout_ms = 60000;
    for (int j = 0; j < n; ++j) mget.keys.push_back("peer/" + std::to_string(j));
    multi_get_ = proto::encode_request(mget);  // the same bytes for every connection
  }
  ~MuxDriver() { ::close(epfd_); }

  // Returns an error text, or "" when every connection completed.
  std::string run(Clock::time_point deadline) {
    auto [host, port] = split(store_.server->address());
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    for (size_t k = 0; k < conns_.size(); ++k) {
      Conn& c = conns_[k];
      c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(c.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS)
        return std::string("connect: ") + std::strerror(errno);
      proto::Request hello;
      hello.op = proto::Op::Hello;
      hello.job_id = store_.cfg.job_id;
      hello.token = store_.cfg.token;
      proto::Request set;
      set.op = proto::Op::Set;
      set.key = "peer/" + std::to_string(c.index);
      set.value = "127.0.0.1:" + std::to_string(20000 + c.index);
      proto::Request add;
      add.op = proto::Op::Add;
      add.key = "barrier/rendezvous/count";
      add.delta = 1;
      c.out = proto::encode_request(hello) + proto::encode_request(set) + proto::encode_request(add);
      c.expect = 3;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT;
      ev.data.u64 = k;
      ::epoll_ctl(epfd_, EPOLL_CTL_ADD, c.fd, &ev);
    }
    size_t done = 0;
    std::vector<epoll_event> evs(256);
    while (done < conns_.size()) {
      if (Clock::now() > deadline) return "timed out";
      int m = ::epoll_wait(epfd_, evs.data(), static_cast<int>(evs.size()), 100);
      for (int e = 0; e < m; ++e) {
        Conn& c = conns_[evs[e].data.u64];
        if (evs[e].events & EPOLLOUT) flush(c);
        if (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          std::string err = receive(c);
          if (!err.empty()) return "client " + std::to_string(c.index) + ": " + err;
          if (c.finished) {
            ++done;
            ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
            ::close(c.fd);
          }
        }
      }
    }
    return "";
  }

 private:
  struct Conn {
    int index = 0;
    int fd = -1;
    int stage = 0;   // 0: hello/set/add, 1: wait, 2: multi_get
    int expect = 0;  // replies still due in this stage
    bool finished = false;
    std::string out, in;
  };

  static std::pair<std::string, int> split(const std::string& a) {
    auto colon = a.rfind(':');
    return {a.substr(0, colon), std::stoi(a.substr(colon + 1))};
  }

  void flush(Conn& c) {
    while (!c.out.empty()) {
      ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (w <= 0) break;
      c.out.erase(0, static_cast<size_t>(w));
    }
    epoll_event ev{};
    ev.events = EPOLLIN | (c.out.empty() ? 0u : EPOLLOUT);
    ev.data.u64 = static_cast<uint64_t>(&c - conns_.data());
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  std::string receive(Conn& c) {
    char buf[65536];
    for (;;) {
      ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) {
        c.in.append(buf, static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (r < 0 && errno == EINTR) continue;
      return "connection closed by the store";
    }
    for (;;) {
      auto d = proto::decode_reply(c.in, proto::Limits{});
      if (d.state == proto::Parse::Error) return d.message;
      if (d.state == proto::Parse::NeedMore) return "";
      c.in.erase(0, d.consumed);
      const proto::Reply& rep = d.value;
      if (rep.status != proto::Status::Ok) return std::string(proto::status_name(rep.status)) + ": " + rep.message;
      --c.expect;
      if (c.stage == 0 && c.expect == 0) {  // the ADD's answer
        proto::Request wait;
        wait.op = proto::Op::Wait;
        wait.timeout_ms = 60000;
        wait.keys = {"barrier/rendezvous/done/0"};
        c.out.clear();
        c.expect = 1;
        if (rep.number == n_) {
          proto::Request set;
          set.op = proto::Op::Set;
          set.key = wait.keys[0];
          set.value = "1";
          c.out = proto::encode_request(set);
          c.expect = 2;
        }
        c.out += proto::encode_request(wait);
        c.stage = 1;
        flush(c);
      } else if (c.stage == 1 && c.expect == 0) {
        c.out = multi_get_;
        c.expect = 1;
        c.stage = 2;
        flush(c);
      } else if (c.stage == 2) {
        int next = (c.index + 1) % n_;
        if (rep.values.size() != static_cast<size_t>(n_) ||
            rep.values[next] != "127.0.0.1:" + std::to_string(20000 + next))
          return "wrong MULTI_GET answer";
        c.finished = true;
        std::string().swap(c.in);
        return "";
      }
    }
  }

  const Store& store_;
  int n_;
  std::vector<Conn> conns_;
  int epfd_ = -1;
  std::string multi_get_;
};

double rendezvous_mux(int n, int drivers) {
  Store store;
  std::vector<std::unique_ptr<MuxDriver>> ds;
  for (int t = 0; t < drivers; ++t) ds.push_back(std::make_unique<MuxDriver>(store, n, t, drivers));
  StartGate gate;
  std::vector<std::string> errors(drivers);
  std::vector<std::thread> threads;
  for (int t = 0; t < drivers; ++t)
    threads.emplace_back([&, t] {
      gate.wait();
      errors[t] = ds[t]->run(Clock::now() + 120s);
    });
  auto t0 = Clock::now();
  gate.open();
  for (auto& th : threads) th.join();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return s;
}

// --- Request rate ---
double rate(int clients, double seconds, bool set) {
  Store store;
  StartGate gate;
  std::atomic<bool> stop{false};
  std::atomic<long> ops{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      proto::Client c(store.options(i));
      const std::string key = "k/" + std::to_string(i);
      c.set(key, "value-of-some-16b");
      gate.wait();
      long n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (set)
          c.set(key, "value-of-some-16b");
        else
          (void)c.get(key, 10s);
        ++n;
      }
      ops += n;
    });
  auto t0 = Clock::now();
  gate.open();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured interval
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(ops.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: store_bench rendezvous N [RUNS]\n"
               "       store_bench mux N [RUNS]\n"
               "       store_bench rate CLIENTS SECONDS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  spdlog::set_level(spdlog::level::warn);
  if (argc < 3) return usage();
  std::string mode = argv[1];
  try {
    if (mode == "rendezvous") {
      int n = std::atoi(argv[2]);
      int runs = argc > 3 ? std::atoi(argv[3]) : 5;
      if (n < 1 || runs < 1) return usage();
      std::vector<double> t;
      Phases p;
      for (int r = 0; r < runs; ++r) {
        t.push_back(rendezvous_once(n, p));
        if (std::getenv("STORE_BENCH_PHASES"))
          std::printf("  run %d: all set %.3f s, barrier %.3f s, multi_get %.3f s\n", r, p.set,
                      p.barrier, p.multi_get);
      }
      std::vector<double> sorted = t;
      std::sort(sorted.begin(), sorted.end());
      std::printf("rendezvous N=%d: median %.3f s over %d runs (", n, sorted[sorted.size() / 2], runs);
      for (size_t i = 0; i < t.size(); ++i) std::printf("%s%.3f", i ? " " : "", t[i]);
      std::printf(")\n");
    } else if (mode == "mux") {
      int n = std::atoi(argv[2]);
      int runs = argc > 3 ? std::atoi(argv[3]) : 5;
      if (n < 1 || runs < 1) return usage();
      std::vector<double> t;
      for (int r = 0; r < runs; ++r) t.push_back(rendezvous_mux(n, 2));
      std::vector<double> sorted = t;
      std::sort(sorted.begin(), sorted.end());
      std::printf("rendezvous N=%d (2 threads multiplexing): median %.3f s over %d runs (", n,
                  sorted[sorted.size() / 2], runs);
      for (size_t i = 0; i < t.size(); ++i) std::printf("%s%.3f", i ? " " : "", t[i]);
      std::printf(")\n");
    } else if (mode == "rate") {
      int clients = std::atoi(argv[2]);
      double seconds = std::atof(argv[3]);
      if (clients < 1 || seconds <= 0) return usage();
      double s = rate(clients, seconds, true);
      double g = rate(clients, seconds, false);
      std::printf("requests/s with %d clients: SET %.0f, GET %.0f\n", clients, s, g);
    } else {
      return usage();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
