// The TCP ring on 127.0.0.1 with every rank a thread of this process; the rendezvous is a map.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/ring_hello.h"

#include "worker/comm/ring_comm.h"
#include "worker/comm/staged_comm.h"
#include "worker/core/backend.h"

using namespace worker;
using namespace std::chrono_literals;

namespace {

class MapRendezvous : public Rendezvous {
 public:
  void publish(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lk(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }
  std::string lookup(const std::string& key, std::chrono::milliseconds timeout, const std::string& writer) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return kv_.count(key) > 0; })) {
      throw CommError("timed out waiting for " + writer + " to publish " + key);
    }
    return kv_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

RingConfig config(int rank, int world, size_t chunk_bytes = size_t(4) << 20) {
  RingConfig c;
  c.rank = rank;
  c.world = world;
  c.job_id = "test";
  c.token = "test-token";
  c.timeout = 20s;
  c.chunk_bytes = chunk_bytes;
  return c;
}

// Runs body(rank, comm) on `world` threads, each with its own ring comm. Rethrows the first error.
void run_ranks(int world, size_t chunk, const std::function<void(int, Comm&)>& body) {
  MapRendezvous rdv;
  std::vector<std::future<void>> fs;
  for (int r = 0; r < world; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      auto comm = make_ring_comm(config(r, world, chunk), rdv);
      body(r, *comm);
    }));
  }
  for (auto& f : fs) f.get();
}

std::vector<float> rank_data(int rank, size_t n) {
  std::mt19937 gen(1234u + unsigned(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(gen) * float(1 + rank * 7);  // different magnitudes: rounding shows
  return v;
}

}  // namespace

TEST_CASE("ring all-reduce: every rank ends with the same bits, close to the exact sum", "[train][ring]") {
  for (int world : {1, 2, 3, 5}) {
    for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(1001), size_t(300007)}) {
      for (size_t chunk : {size_t(64), size_t(4) << 20}) {
        if (n > 5000 && chunk == 64) continue;  // thousands of tiny frames: slow, no new coverage
        INFO("world " << world << ", count " << n << ", chunk " << chunk);
        std::vector<std::vector<float>> out(static_cast<size_t>(world));
        run_ranks(world, chunk, [&](int r, Comm& comm) {
          auto v = rank_data(r, n);
          comm.allreduce_sum(v.data(), n);
          comm.allreduce_sum(v.data(), 0);  // empty collectives keep the ranks in step
          out[size_t(r)] = std::move(v);
        });
        for (int r = 1; r < world; ++r) {
          REQUIRE(std::memcmp(out[0].data(), out[size_t(r)].data(), n * sizeof(float)) == 0);
        }
        std::vector<double> exact(n, 0.0);
        for (int r = 0; r < world; ++r) {
          const auto v = rank_data(r, n);
          for (size_t i = 0; i < n; ++i) exact[i] += v[i];
        }
        for (size_t i = 0; i < n; ++i) REQUIRE(out[0][i] == Approx(exact[i]).margin(1e-4));
      }
    }
  }
}

TEST_CASE("ring broadcast and all-gather", "[train][ring]") {
  for (int world : {2, 3, 5}) {
    for (int root = 0; root < world; ++root) {
      INFO("world " << world << ", root " << root);
      run_ranks(world, 1000, [&](int r, Comm& comm) {
        std::vector<uint8_t> buf(12345, uint8_t(r));
        if (r == root) {
          for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 31 + 7);
        }
        comm.broadcast(buf.data(), buf.size(), root);
        for (size_t i = 0; i < buf.size(); ++i) REQUIRE(buf[i] == uint8_t(i * 31 + 7));

        const double mine = 10.0 * r + 0.5;
        std::vector<double> all(static_cast<size_t>(world));
        comm.allgather_host(&mine, all.data(), sizeof(double));
        for (int q = 0; q < world; ++q) REQUIRE(all[size_t(q)] == 10.0 * q + 0.5);
      });
    }
  }
}

TEST_CASE("a rank that dies mid-job: the others fail fast with an error naming a rank", "[train][ring]") {
  const int world = 3;
  MapRendezvous rdv;
  std::vector<std::future<std::string>> fs;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      auto comm = make_ring_comm(config(r, world), rdv);
      std::vector<float> v(100000, 1.0f);
      comm->allreduce_sum(v.data(), v.size());  // everybody healthy once
      if (r == 2) return "died";                // rank 2 exits: its sockets close
      try {
        comm->allreduce_sum(v.data(), v.size());
      } catch (const CommError& e) {
        // Whoever noticed reports the neighbour it lost, for the launcher's root cause.
        if (!e.peer_lost() || !e.lost_peer() || *e.lost_peer() == r) return std::string("not a lost peer: ") + e.what();
        return e.what();
      }
      return "no error";
    }));
  }
  const std::string e0 = fs[0].get(), e1 = fs[1].get();
  CHECK(fs[2].get() == "died");
  INFO(e0 << "\n" << e1);
  // Each survivor fails naming a neighbour; which one notices first is a race (rank 1 may see
  // rank 2 gone, fail and close, so rank 0 then sees rank 1 gone), but rank 2 is always named.
  CHECK(e0.find("rank 0: ring all-reduce: rank ") == 0);
  CHECK(e1.find("rank 1: ring all-reduce: rank ") == 0);
  CHECK((e0.find("rank 2 (") != std::string::npos || e1.find("rank 2 (") != std::string::npos));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // well below the 20 s timeout: no hang
}

TEST_CASE("a silent rank: the waiting rank times out naming it", "[train][ring]") {
  MapRendezvous rdv;
  std::promise<void> done;
  auto silent = std::async(std::launch::async, [&] {
    auto cfg = config(1, 2);
    auto comm = make_ring_comm(cfg, rdv);
    done.get_future().wait_for(30s);  // alive but never joins the collective
  });
  auto cfg = config(0, 2);
  cfg.timeout = 300ms;
  std::string err;
  std::optional<int> lost;
  {
    auto comm = make_ring_comm(cfg, rdv);
    std::vector<float> v(10, 1.0f);
    try {
      comm->allreduce_sum(v.data(), v.size());
    } catch (const CommError& e) {
      err = e.what();
      if (e.peer_lost()) lost = e.lost_peer();
    }
  }
  done.set_value();
  silent.get();
  INFO(err);
  CHECK(err.find("no progress") != std::string::npos);
  CHECK(err.find("rank 1") != std::string::npos);
  CHECK(lost == std::optional<int>(1));  // the silent rank is the one lost
}

namespace {

// Two ranks of one ring set up with configurations that differ (edit(rank, cfg)); the errors of
// rank 0 and rank 1 ("" for one that formed the ring).
std::pair<std::string, std::string> mismatched_pair(const std::function<void(int, RingConfig&)>& edit) {
  MapRendezvous rdv;
  auto attempt = [&rdv, &edit](int rank) -> std::string {
    auto cfg = config(rank, 2);
    cfg.timeout = 5s;
    edit(rank, cfg);
    try {
      make_ring_comm(cfg, rdv);
    } catch (const CommError& e) {
      return e.what();
    }
    return "";
  };
  auto a = std::async(std::launch::async, attempt, 0);
  const std::string eb = attempt(1);
  return {a.get(), eb};
}

}  // namespace

TEST_CASE("ranks of different jobs refuse to form a ring", "[train][ring]") {
  const auto [ea, eb] = mismatched_pair([](int rank, RingConfig& c) {
    if (rank == 1) c.job_id = "other";
  });
  INFO(ea << "\n" << eb);
  CHECK((ea.find("job") != std::string::npos || eb.find("job") != std::string::npos));
  CHECK(!ea.empty());
  CHECK(!eb.empty());
}

TEST_CASE("ranks with different tokens refuse to form a ring", "[train][ring]") {
  const auto [ea, eb] = mismatched_pair([](int rank, RingConfig& c) { c.token = rank == 0 ? "token-a" : "token-b"; });
  INFO(ea << "\n" << eb);
  // The first to check a MAC finds that its neighbour cannot prove the token (the other may see
  // that rank leave first): neither joins.
  auto says = [](const std::string& e) {
    return e.find("did not prove it belongs to this job") != std::string::npos || e.find("bad proof") != std::string::npos;
  };
  CHECK((says(ea) || says(eb)));
  CHECK(!ea.empty());
  CHECK(!eb.empty());
}

// --- Strangers on a rank's port during the set-up (issue 22, item 2)

namespace {

namespace rh = proto::ring;

// A client of a rank's ring port that is not a rank: the attacker.
class Stranger {
 public:
  explicit Stranger(const std::string& addr) {
    const size_t colon = addr.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
    ::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &a.sin_addr);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Stranger() { ::close(fd_); }
  void send(const std::string& bytes) { REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size())); }
  // The next set-up message, or nullopt when the rank closed the connection first (bounded: 5 s).
  std::optional<rh::Message> receive() {
    std::string in;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (true) {
      const rh::Decoded d = rh::decode(in);
      if (d.state == rh::Parse::Ok) return d.msg;
      REQUIRE(d.state == rh::Parse::NeedMore);
      if (!readable_before(deadline)) FAIL("no answer from the rank within 5 s");
      char buf[256];
      const ssize_t k = ::recv(fd_, buf, std::min(sizeof buf, rh::bytes_wanted(in)), 0);
      if (k <= 0) return std::nullopt;
      in.append(buf, size_t(k));
    }
  }
  // Whether the rank closed this connection within `limit`.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    char buf[256];
    while (readable_before(deadline)) {
      const ssize_t k = ::recv(fd_, buf, sizeof buf, 0);
      if (k <= 0) return true;
    }
    return false;
  }

 private:
  bool readable_before(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, int(std::max<long long>(0, left.count()))) > 0;
  }
  int fd_ = -1;
};

rh::Nonce some_nonce(uint8_t v) {
  rh::Nonce n{};
  n.fill(v);
  return n;
}

}  // namespace

TEST_CASE("ring set-up: strangers are refused or dropped without ending the rank, the real ranks still meet",
          "[train][ring][security]") {
  const int world = 3;  // rank 0's left neighbour is rank 2
  MapRendezvous rdv;
  std::mutex mu;
  std::vector<std::string> warnings;
  auto cfg_of = [&](int r) {
    auto cfg = config(r, world);
    cfg.handshake_timeout = 500ms;
    cfg.warn = [&mu, &warnings](const std::string& w) {
      std::lock_guard<std::mutex> lk(mu);
      warnings.push_back(w);
    };
    return cfg;
  };
  auto run = [&](int r) {
    auto comm = make_ring_comm(cfg_of(r), rdv);
    std::vector<float> v(1000, float(r + 1));
    comm->allreduce_sum(v.data(), v.size());
    return v[0];
  };
  // Ranks 0 and 1 start; rank 0 connects to rank 1 and then serves its port (strangers included)
  // while it waits for its left neighbour, rank 2, which starts last.
  auto rank0 = std::async(std::launch::async, run, 0);
  auto rank1 = std::async(std::launch::async, run, 1);
  const std::string addr = rdv.lookup("ring/0/addr/0", 10s, "rank 0");

  // An idle connection is dropped after the set-up limit (not after --comm-timeout).
  {
    Stranger idle(addr);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(idle.closed_within(3s));
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    CHECK(ms >= 400ms);
    CHECK(ms < 2500ms);
  }
  // Version 1's 20-byte hello for rank 2 of job "test": closed, nothing else.
  {
    Stranger v1(addr);
    v1.send(std::string("RNG1\x01\0\0\0\x03\0\0\0\x02\0\0\0\x04\0\0\0test", 24));
    CHECK(!v1.receive());
  }
  // A hello of another job, and one of the wrong rank: refused with their verdicts.
  {
    Stranger job(addr);
    job.send(rh::encode_hello(3, 2, "default", some_nonce(1)));
    const auto v = job.receive();
    REQUIRE(v);
    CHECK(v->type == rh::Type::Verdict);
    CHECK(v->verdict == rh::Verdict::WrongJob);
    CHECK(job.closed_within(2s));
    Stranger rank(addr);
    rank.send(rh::encode_hello(3, 1, "test", some_nonce(2)));
    const auto w = rank.receive();
    REQUIRE(w);
    CHECK(w->verdict == rh::Verdict::WrongRank);
  }
  // The right claim without the token: "rank 2 of job test" is challenged, cannot answer.
  {
    Stranger fake(addr);
    fake.send(rh::encode_hello(3, 2, "test", some_nonce(3)));
    const auto ch = fake.receive();
    REQUIRE(ch);
    REQUIRE(ch->type == rh::Type::Challenge);
    fake.send(rh::encode_proof(rh::Mac{}));
    const auto v = fake.receive();
    REQUIRE(v);
    CHECK(v->verdict == rh::Verdict::BadProof);
  }
  // A replayed set-up: the proof a real rank 2 gave for an earlier challenge (computed with the
  // token, for another acceptor nonce) does not answer this one.
  {
    Stranger replay(addr);
    const rh::Nonce mine = some_nonce(4);
    replay.send(rh::encode_hello(3, 2, "test", mine));
    const auto ch = replay.receive();
    REQUIRE(ch);
    REQUIRE(ch->type == rh::Type::Challenge);
    const rh::Transcript earlier{"ring/0", "test", 3, 2, mine, some_nonce(5)};
    replay.send(rh::encode_proof(rh::transcript_mac("test-token", rh::Role::Connector, earlier)));
    const auto v = replay.receive();
    REQUIRE(v);
    CHECK(v->verdict == rh::Verdict::BadProof);
  }
  // An idle stranger and one that sends half a hello stay connected while the real ranks meet.
  Stranger idle(addr);
  Stranger half(addr);
  half.send(rh::encode_hello(3, 2, "test", some_nonce(6)).substr(0, 20));
  const auto t0 = std::chrono::steady_clock::now();
  auto rank2 = std::async(std::launch::async, run, 2);
  CHECK(rank0.get() == 6.0f);
  CHECK(rank1.get() == 6.0f);
  CHECK(rank2.get() == 6.0f);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);  // not held up by the strangers (set-up limit: 0.5 s)
  CHECK(idle.closed_within(2s));  // dropped once the left neighbour was in

  std::string all;
  for (const std::string& w : warnings) all += w + "\n";
  INFO(all);
  CHECK_THAT(all, Catch::Contains("rank 0: ring setup: refused a connection from 127.0.0.1:"));
  CHECK_THAT(all, Catch::Contains("no complete set-up 500 ms after it connected"));
  CHECK_THAT(all, Catch::Contains("version 1"));
  CHECK_THAT(all, Catch::Contains("job 'default': wrong job id"));
  CHECK_THAT(all, Catch::Contains("this rank's left neighbour is rank 2"));
  CHECK_THAT(all, Catch::Contains("without a valid proof"));
}

namespace {

// A port that was free a moment ago (the kernel's choice; the race with other programs on this
// machine is accepted in a test).
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("without a store: fixed endpoints, connections retried until the peer listens", "[train][ring]") {
  const int world = 3;
  std::vector<std::string> eps;
  std::vector<uint16_t> ports;
  for (int r = 0; r < world; ++r) {
    ports.push_back(free_port());
    eps.push_back("127.0.0.1:" + std::to_string(ports.back()));
  }
  std::vector<std::future<std::vector<float>>> fs;
  // Rank 0 starts alone: its first connection attempts to rank 1 are refused, then retried.
  std::promise<void> first_started;
  auto first = first_started.get_future().share();
  for (int r = 0; r < world; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      if (r > 0) first.wait();
      auto rdv = make_endpoint_rendezvous(eps, "ring/t");
      auto cfg = config(r, world);
      cfg.bind_port = ports[size_t(r)];
      cfg.retry_connect = true;
      cfg.key_prefix = "ring/t";
      cfg.timeout = 10s;
      if (r == 0) first_started.set_value();
      auto comm = make_ring_comm(cfg, *rdv);
      std::vector<float> v(1000, float(r + 1));
      comm->allreduce_sum(v.data(), v.size());
      return v;
    }));
  }
  for (auto& f : fs) {
    const auto v = f.get();
    CHECK(v.front() == 6.0f);
    CHECK(v.back() == 6.0f);
  }
}

// --- ZeRO's halves (issue 15): reduce-scatter then all-gather is the all-reduce, bit for bit.

TEST_CASE("ring reduce-scatter + all-gather equal the all-reduce bit for bit", "[train][ring][zero]") {
  for (int world : {2, 3, 5}) {
    for (size_t n : {size_t(0), size_t(1), size_t(4), size_t(1001), size_t(300007)}) {
      for (size_t chunk : {size_t(64), size_t(4) << 20}) {
        if (n > 5000 && chunk == 64) continue;
        INFO("world " << world << ", count " << n << ", chunk " << chunk);
        std::vector<std::vector<float>> reduced(static_cast<size_t>(world)), split(reduced.size());
        std::vector<std::vector<float>> scattered(reduced.size());
        run_ranks(world, chunk, [&](int r, Comm& comm) {
          auto a = rank_data(r, n), b = a;
          comm.allreduce_sum(a.data(), n);
          comm.reduce_scatter_sum(b.data(), n);
          scattered[size_t(r)] = b;
          comm.allgather(b.data(), n);
          reduced[size_t(r)] = std::move(a);
          split[size_t(r)] = std::move(b);
        });
        for (int r = 0; r < world; ++r) {
          REQUIRE(std::memcmp(reduced[0].data(), split[size_t(r)].data(), n * sizeof(float)) == 0);
          REQUIRE(std::memcmp(reduced[0].data(), reduced[size_t(r)].data(), n * sizeof(float)) == 0);
          const auto [off, len] = comm_block(n, world, r);  // the owner's block is final already
          REQUIRE(std::memcmp(reduced[0].data() + off, scattered[size_t(r)].data() + off, len * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("ring all-gather copies each rank's block, blocks of unequal size included", "[train][ring][zero]") {
  for (int world : {2, 3, 5}) {
    for (size_t n : {size_t(2), size_t(7), size_t(10007)}) {
      INFO("world " << world << ", count " << n);
      run_ranks(world, 256, [&](int r, Comm& comm) {
        std::vector<float> v(n, -1.0f);
        const auto [off, len] = comm_block(n, world, r);
        for (size_t i = off; i < off + len; ++i) v[i] = float(i) + 0.25f;
        comm.allgather(v.data(), n);
        for (size_t i = 0; i < n; ++i) REQUIRE(v[i] == float(i) + 0.25f);
      });
    }
  }
}

// --comm ring on GPUs: the ring over backend memory through host copies. Here the backend is the
// CPU's (its copies are memcpy), which checks what the staging moves: the bare ring's results bit
// for bit, the all-gather reading this rank's block only, the reduce-scatter writing it only.
TEST_CASE("staged ring: the bare ring's results, moving only the blocks the contract names", "[train][ring][zero]") {
  for (int world : {2, 3}) {
    const size_t n = 10007;
    INFO("world " << world);
    MapRendezvous rdv, rdv_bare;
    std::vector<std::future<void>> fs;
    for (int r = 0; r < world; ++r) {
      fs.push_back(std::async(std::launch::async, [&, r] {
        auto ops = make_cpu_ops(1);
        auto comm = make_staged_comm(make_ring_comm(config(r, world, 4096), rdv), *ops);
        auto bare = make_ring_comm(config(r, world, 4096), rdv_bare);
        const auto [off, len] = comm_block(n, world, r);
        float* dev = static_cast<float*>(ops->alloc(n * sizeof(float)));
        const std::vector<float> mine = rank_data(r, n);

        std::vector<float> want = mine, got(n);
        bare->allreduce_sum(want.data(), n);
        ops->upload(dev, mine.data(), n * sizeof(float));
        comm->allreduce_sum(dev, n);
        ops->download(got.data(), dev, n * sizeof(float));
        REQUIRE(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);

        want = mine;
        bare->reduce_scatter_sum(want.data(), n);
        ops->upload(dev, mine.data(), n * sizeof(float));
        comm->reduce_scatter_sum(dev, n);
        ops->download(got.data(), dev, n * sizeof(float));
        size_t wrong = 0;  // this rank's block is the reduced one, the others are as they were
        for (size_t i = 0; i < n; ++i) wrong += got[i] != (i >= off && i < off + len ? want[i] : mine[i]);
        REQUIRE(wrong == 0);

        // The other blocks hold NaN on the device: the all-gather must not read them.
        std::vector<float> block(n, std::nanf(""));
        std::copy(mine.begin() + long(off), mine.begin() + long(off + len), block.begin() + long(off));
        want = mine;
        bare->allgather(want.data(), n);
        ops->upload(dev, block.data(), n * sizeof(float));
        comm->allgather(dev, n);
        ops->download(got.data(), dev, n * sizeof(float));
        REQUIRE(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);

        ops->upload(dev, mine.data(), n * sizeof(float));
        comm->broadcast(dev, 3 * sizeof(float) + 1, world - 1);  // bytes need not be whole floats
        ops->download(got.data(), dev, n * sizeof(float));
        const std::vector<float> last = rank_data(world - 1, n);
        REQUIRE(std::memcmp(got.data(), last.data(), 3 * sizeof(float) + 1) == 0);
        REQUIRE(std::memcmp(got.data() + 4, mine.data() + 4, (n - 4) * sizeof(float)) == 0);
        REQUIRE_FALSE(comm->overlaps_compute());
      }));
    }
    for (auto& f : fs) f.get();
  }
}

TEST_CASE("barrier_untimed: a rank busy far past the silence limit is waited for; one that exits is not", "[train][ring]") {
  const int world = 3;
  {
    MapRendezvous rdv;
    std::vector<std::future<void>> fs;
    for (int r = 0; r < world; ++r) {
      fs.push_back(std::async(std::launch::async, [&, r] {
        auto cfg = config(r, world);
        cfg.timeout = 200ms;
        auto comm = make_ring_comm(cfg, rdv);
        if (r == 0) std::this_thread::sleep_for(1200ms);  // rank 0 "writes a checkpoint": 6 timeouts long
        comm->barrier_untimed();
        std::vector<float> v(1000, float(r));
        comm->allreduce_sum(v.data(), v.size());  // still in step, the limit back in force
        REQUIRE(v[0] == 0.0f + 1.0f + 2.0f);
      }));
    }
    for (auto& f : fs) f.get();
  }
  MapRendezvous rdv;
  const auto t0 = std::chrono::steady_clock::now();
  auto gone = std::async(std::launch::async, [&] { make_ring_comm(config(1, 2), rdv); });  // exits at once
  auto comm = make_ring_comm(config(0, 2), rdv);
  gone.get();
  std::optional<int> lost;
  try {
    comm->barrier_untimed();
  } catch (const CommError& e) {
    if (e.peer_lost()) lost = e.lost_peer();
  }
  CHECK(lost == std::optional<int>(1));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // noticed from the closed connection
}

TEST_CASE("ring allgather_host_start/finish: the blocking all-gather's result", "[train][ring]") {
  run_ranks(3, 1000, [](int r, Comm& comm) {
    const int32_t mine[2] = {r, 100 + r};
    int32_t all[6] = {};
    comm.allgather_host_start(mine, all, sizeof mine);
    std::vector<float> v(10, 1.0f);
    comm.allreduce_sum(v.data(), v.size());  // other collectives may come between
    comm.allgather_host_finish();
    for (int q = 0; q < 3; ++q) {
      REQUIRE(all[2 * q] == q);
      REQUIRE(all[2 * q + 1] == 100 + q);
    }
  });
}
