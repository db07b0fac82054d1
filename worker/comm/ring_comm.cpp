#include "worker/comm/ring_comm.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "proto/client.h"
#include "proto/ring_hello.h"
#include "worker/comm/ring_socket.h"

namespace worker {

namespace {

using namespace ring_io;  // the socket layer: Fd, Peer, lost, wait_fd, send_all, read_message, ...
using ms = std::chrono::milliseconds;

namespace ring = proto::ring;

constexpr uint32_t kFrameMagic = 0x46474e52u;  // "RNGF"
constexpr size_t kFrameHeader = 16;            // magic u32 | seq u32 | length u64
// Connections proving themselves at once (a stranger's cost: a socket and at most 1.1 KB);
// beyond, the oldest is dropped.
constexpr size_t kMaxCandidates = 64;
constexpr int kMaxWarnings = 10;  // refused connections named one by one; the rest counted

// --- Little-endian integers (explicit, whatever the host order)

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// A connection to this rank's port that has not proved it is the left neighbour yet.
struct Candidate {
  Fd fd;
  std::string addr;             // "ip:port", for the log
  Clock::time_point deadline;   // accepted + RingConfig::handshake_timeout
  std::string in;               // the message being read
  bool challenged = false;      // HELLO read, CHALLENGE sent: PROOF next
  ring::Nonce connector_nonce{}, acceptor_nonce{};
};

// --- The ring

class RingComm final : public Comm {
 public:
  RingComm(const RingConfig& cfg, Rendezvous& rdv) : cfg_(cfg) {
    left_ = (cfg.rank + cfg.world - 1) % cfg.world;
    right_ = (cfg.rank + 1) % cfg.world;
    connect_ring(rdv);
    chunk_elems_ = std::max<size_t>(1, cfg_.chunk_bytes / sizeof(float));
    tmp_.resize(chunk_elems_ + 1);
  }

  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.world; }
  void wait() override {}

  void allreduce_sum(float* data, size_t count) override {
    reduce_scatter(data, count, "ring all-reduce");
    gather(data, count, "ring all-reduce");
  }
  void reduce_scatter_sum(float* data, size_t count) override { reduce_scatter(data, count, "ring reduce-scatter"); }
  void allgather(float* data, size_t count) override { gather(data, count, "ring all-gather"); }

  // Pipelined along the ring from root: each rank receives chunk c while forwarding c - 1.
  void broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= cfg_.world) throw CommError("broadcast: root " + std::to_string(root) + " out of range");
    auto* p = static_cast<uint8_t*>(data);
    const size_t chunk = cfg_.chunk_bytes;
    const size_t nch = std::max<size_t>(1, (bytes + chunk - 1) / chunk);
    auto range = [&](size_t c) {
      const size_t b = c * chunk;
      return std::make_pair(b, std::min(bytes, b + chunk));
    };
    const bool forward = right_ != root;
    for (size_t c = 0; c <= nch; ++c) {
      const uint8_t* send = nullptr;
      size_t send_len = 0;
      uint8_t* recv = nullptr;
      size_t recv_len = 0;
      if (cfg_.rank == root) {
        if (c == nch) break;
        const auto [b, e] = range(c);
        send = p + b;
        send_len = e - b;
      } else {
        if (c > 0 && forward) {
          const auto [b, e] = range(c - 1);
          send = p + b;
          send_len = e - b;
        }
        if (c < nch) {
          const auto [b, e] = range(c);
          recv = p + b;
          recv_len = e - b;
        }
      }
      transfer(send, send_len, send != nullptr, recv, recv_len, recv != nullptr, "ring broadcast");
    }
  }

  void allgather_host(const void* send, void* recv, size_t bytes) override {
    auto* out = static_cast<uint8_t*>(recv);
    const int w = cfg_.world;
    if (bytes > 0) std::memmove(out + size_t(cfg_.rank) * bytes, send, bytes);
    for (int s = 0; s + 1 < w; ++s) {
      const int send_blk = (cfg_.rank - s + 2 * w) % w;
      const int recv_blk = (cfg_.rank - s - 1 + 2 * w) % w;
      exchange(out + size_t(send_blk) * bytes, bytes, out + size_t(recv_blk) * bytes, bytes,
               "ring all-gather");
    }
  }

  // An all-gather of one byte with the silence limit off: the ranks leave when all have come.
  void barrier_untimed() override {
    untimed_ = true;
    struct Restore {
      bool& on;
      ~Restore() { on = false; }
    } restore{untimed_};
    const uint8_t mine = 0;
    std::vector<uint8_t> all(size_t(cfg_.world));
    allgather_host(&mine, all.data(), 1);
  }

 private:
  // --- The two halves of the all-reduce, over the blocks of comm_block(). Block j's sum starts
  // at rank j + 1 and travels the ring to its owner j, each rank adding its own value to what
  // arrives; the all-gather then copies the sums. So allreduce_sum, and a reduce_scatter_sum
  // followed by allgather over the same range, form every element's sum by the same additions
  // in the same order: ZeRO's result is bit-identical to the all-reduce's.
  // Sub-range c of block j (nchunks per block, the same split on every rank).
  std::pair<size_t, size_t> chunk(size_t count, int j, size_t c, size_t nchunks) const {
    const auto [b, len] = comm_block(count, cfg_.world, j);
    return {b + c * len / nchunks, b + (c + 1) * len / nchunks};
  }
  size_t chunks_per_block(size_t count) const {
    return std::max<size_t>(1, ((count + cfg_.world - 1) / cfg_.world + chunk_elems_ - 1) / chunk_elems_);
  }
  int block_at(int offset) const { return ((cfg_.rank + offset) % cfg_.world + cfg_.world) % cfg_.world; }

  void reduce_scatter(float* data, size_t count, const std::string& what) {
    const size_t nchunks = chunks_per_block(count);
    for (int s = 0; s + 1 < cfg_.world; ++s) {  // step s: pass on block r-s-1, add into block r-s-2
      const int send_blk = block_at(-s - 1), recv_blk = block_at(-s - 2);
      for (size_t c = 0; c < nchunks; ++c) {
        const auto [sb, se] = chunk(count, send_blk, c, nchunks);
        const auto [rb, re] = chunk(count, recv_blk, c, nchunks);
        exchange(data + sb, (se - sb) * sizeof(float), tmp_.data(), (re - rb) * sizeof(float), what);
        float* dst = data + rb;
        const float* src = tmp_.data();
        for (size_t i = 0, n = re - rb; i < n; ++i) dst[i] = src[i] + dst[i];
      }
    }
  }

  void gather(float* data, size_t count, const std::string& what) {
    const size_t nchunks = chunks_per_block(count);
    for (int s = 0; s + 1 < cfg_.world; ++s) {  // step s: pass on block r-s, receive block r-s-1
      const int send_blk = block_at(-s), recv_blk = block_at(-s - 1);
      for (size_t c = 0; c < nchunks; ++c) {
        const auto [sb, se] = chunk(count, send_blk, c, nchunks);
        const auto [rb, re] = chunk(count, recv_blk, c, nchunks);
        exchange(data + sb, (se - sb) * sizeof(float), data + rb, (re - rb) * sizeof(float), what);
      }
    }
  }

  std::string peer_name(int r) const {
    const std::string& addr = r == right_ ? right_addr_ : left_addr_;
    return "rank " + std::to_string(r) + (addr.empty() ? "" : " (" + addr + ")");
  }
  Peer peer(int r) const { return {peer_name(r), r}; }
  std::string context(const std::string& what) const {
    return "rank " + std::to_string(cfg_.rank) + ": " + what;
  }

  void connect_ring(Rendezvous& rdv) {
    const auto deadline = Clock::now() + cfg_.timeout;
    const std::string what = context("ring setup");
    // Listen on an ephemeral port of our own host; publish it.
    Fd lst(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (lst.get() < 0) throw CommError(what + ": socket: " + errno_text(errno));
    sockaddr_in addr = resolve(cfg_.bind_host, cfg_.bind_port, what);
    const int one = 1;
    if (cfg_.bind_port != 0) ::setsockopt(lst.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(lst.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw CommError(what + ": cannot bind " + cfg_.bind_host + ":" + std::to_string(cfg_.bind_port) + ": " +
                      errno_text(errno));
    }
    if (::listen(lst.get(), 64) != 0) throw CommError(what + ": listen: " + errno_text(errno));
    socklen_t len = sizeof addr;
    ::getsockname(lst.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    set_socket_options(lst.get());
    rdv.publish(cfg_.key_prefix + "/addr/" + std::to_string(cfg_.rank), format_addr(addr));

    // Connect to the right neighbour and introduce ourselves.
    try {
      right_addr_ = rdv.lookup(cfg_.key_prefix + "/addr/" + std::to_string(right_), cfg_.timeout,
                               "rank " + std::to_string(right_));
    } catch (const proto::StoreError& e) {
      // The store answered, but the neighbour never published its address: it is the one missing.
      if (e.kind() == proto::StoreError::Kind::Timeout) lost(peer(right_), what + ": " + e.what());
      throw;
    }
    const auto [host, port] = split_addr(right_addr_, what);
    sockaddr_in raddr = resolve(host, port, what);
    connect_right(raddr, deadline, what);
    handshake(lst.get(), deadline, what);
    // Already published (the left rank published before connecting): names it in errors.
    left_addr_ = rdv.lookup(cfg_.key_prefix + "/addr/" + std::to_string(left_), cfg_.timeout,
                            "rank " + std::to_string(left_));
  }

  // --- The set-up's two halves, interleaved by one poll loop: as connector this rank proves
  // itself to its right neighbour (HELLO, then PROOF for its CHALLENGE, then its VERDICT), as
  // acceptor it drives every connection to its port until one proves it is the left neighbour.
  // Neither half waits on the other (each rank's right neighbour is another's left), and no
  // stranger's connection holds up the real one.
  void handshake(int listener, Clock::time_point deadline, const std::string& what) {
    conn_.nonce = ring::random_nonce();
    const std::string hello = ring::encode_hello(uint32_t(cfg_.world), uint32_t(cfg_.rank), cfg_.job_id, conn_.nonce);
    send_all(send_fd_.get(), reinterpret_cast<const uint8_t*>(hello.data()), hello.size(), deadline, peer(right_),
             what);
    std::vector<Candidate> cands;
    std::vector<pollfd> fds;
    while (!conn_.done || recv_fd_.get() < 0) {
      fds.clear();
      if (!conn_.done) fds.push_back({send_fd_.get(), POLLIN, 0});
      const size_t first_cand = fds.size() + 1;
      auto wake = deadline;
      if (recv_fd_.get() < 0) {
        fds.push_back({listener, POLLIN, 0});
        for (const Candidate& c : cands) {
          fds.push_back({c.fd.get(), POLLIN, 0});
          wake = std::min(wake, c.deadline);
        }
      }
      const int rc = ::poll(fds.data(), nfds_t(fds.size()), remaining_ms(wake));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) throw CommError(what + ": poll: " + errno_text(errno));
      if (!conn_.done && fds[0].revents) on_right(deadline, what);
      if (recv_fd_.get() < 0) {
        for (size_t k = 0; k < cands.size() && recv_fd_.get() < 0; ++k) {
          if (fds[first_cand + k].revents && on_candidate(cands[k], what)) recv_fd_ = std::move(cands[k].fd);
        }
        if (recv_fd_.get() >= 0) {
          // The left neighbour is in: whoever else is still trying is dropped.
          const auto open = std::count_if(cands.begin(), cands.end(), [](const Candidate& c) { return c.fd.get() >= 0; });
          if (open > 0 && cfg_.warn) {
            cfg_.warn(what + ": " + peer_name(left_) + " is in; closed " + std::to_string(open) +
                      " other connection(s) still setting up");
          }
          cands.clear();
        } else {
          const auto now = Clock::now();
          for (Candidate& c : cands) {
            if (c.fd.get() >= 0 && now >= c.deadline) {
              refused(what, c.addr, "no complete set-up " + std::to_string(cfg_.handshake_timeout.count()) +
                                        " ms after it connected (idle, or not a ring peer)");
              c.fd.reset();
            }
          }
          cands.erase(std::remove_if(cands.begin(), cands.end(), [](const Candidate& c) { return c.fd.get() < 0; }),
                      cands.end());
          if (fds[first_cand - 1].revents) accept_candidates(listener, cands, what);
        }
      }
      if (Clock::now() >= deadline) {
        if (recv_fd_.get() < 0) {
          std::string why;
          if (refused_ > 0) why = "; refused " + std::to_string(refused_) + " connection(s), the last: " + last_refusal_;
          lost(peer(left_), what + ": timed out waiting for " + peer_name(left_) + " to connect" + why);
        }
        if (!conn_.done) lost(peer(right_), what + ": timed out waiting for " + peer_name(right_) +
                                                   " to answer this rank's hello");
      }
    }
  }

  // This rank's half as connector: a CHALLENGE to answer, then the VERDICT. Throws when the right
  // neighbour refuses or fails to prove it holds the token (a configuration error, not a lost peer).
  void on_right(Clock::time_point deadline, const std::string& what) {
    const std::string err = read_message(send_fd_.get(), conn_.in);
    if (!err.empty()) lost(peer(right_), what + ": " + peer_name(right_) + " " + err + " during the set-up");
    const ring::Decoded d = ring::decode(conn_.in);
    if (d.state == ring::Parse::NeedMore) return;
    if (d.state == ring::Parse::Error) throw CommError(what + ": " + peer_name(right_) + " " + d.error);
    conn_.in.clear();
    const ring::Message& m = d.msg;
    const std::string me = "rank " + std::to_string(cfg_.rank) + " of " + std::to_string(cfg_.world) + " of job '" +
                           printable(cfg_.job_id) + "'";
    if (m.type == ring::Type::Verdict) {
      if (m.verdict == ring::Verdict::Accepted && conn_.proved) {
        conn_.done = true;
        return;
      }
      if (m.verdict == ring::Verdict::Accepted) {
        throw CommError(what + ": " + peer_name(right_) + " accepted this rank before challenging it");
      }
      throw CommError(what + ": " + peer_name(right_) + " refused this rank (" +
                      std::string(ring::verdict_name(m.verdict)) + "; this is " + me +
                      "): do both run under one launch, with the same LAUNCH_STORE_TOKEN and job id?");
    }
    if (m.type != ring::Type::Challenge || conn_.proved) {
      throw CommError(what + ": " + peer_name(right_) + " sent a message of type " +
                      std::to_string(uint32_t(m.type)) + " out of turn in the set-up");
    }
    const ring::Transcript t = transcript(cfg_.rank, conn_.nonce, m.nonce);
    if (!ring::mac_equal(m.mac, ring::transcript_mac(cfg_.token, ring::Role::Acceptor, t))) {
      throw CommError(what + ": " + peer_name(right_) + " did not prove it belongs to this job (its MAC does not " +
                      "match: another job's process on that port, or another LAUNCH_STORE_TOKEN)");
    }
    const std::string proof = ring::encode_proof(ring::transcript_mac(cfg_.token, ring::Role::Connector, t));
    send_all(send_fd_.get(), reinterpret_cast<const uint8_t*>(proof.data()), proof.size(), deadline, peer(right_),
             what);
    conn_.proved = true;
  }

  // One step of a connection to this rank's port: true once it proved it is the left neighbour
  // (its VERDICT sent); a refused or failed one is logged and closed (its fd reset).
  bool on_candidate(Candidate& c, const std::string& what) {
    const std::string err = read_message(c.fd.get(), c.in);
    const ring::Decoded d = err.empty() ? ring::decode(c.in) : ring::Decoded{};
    if (err.empty() && d.state == ring::Parse::NeedMore) return false;
    auto drop = [&](const std::string& why, std::optional<ring::Verdict> verdict = std::nullopt) {
      if (verdict) send_now(c.fd.get(), ring::encode_verdict(*verdict));  // best effort: it is dropped anyway
      refused(what, c.addr, why);
      c.fd.reset();
      return false;
    };
    if (!err.empty()) return drop(err + " during the set-up");
    if (d.state == ring::Parse::Error) return drop(d.error);
    c.in.clear();
    const ring::Message& m = d.msg;
    if (!c.challenged) {
      if (m.type != ring::Type::Hello) return drop("sent a message of type " + std::to_string(uint32_t(m.type)) + " first");
      const std::string claim = "a hello for rank " + std::to_string(m.rank) + " of " + std::to_string(m.world) +
                                " of job '" + printable(m.job) + "'";
      if (m.job != cfg_.job_id) return drop(claim + ": wrong job id", ring::Verdict::WrongJob);
      if (int64_t(m.world) != cfg_.world) return drop(claim + ": wrong world size", ring::Verdict::WrongWorld);
      if (int64_t(m.rank) != left_) {
        return drop(claim + ": this rank's left neighbour is rank " + std::to_string(left_), ring::Verdict::WrongRank);
      }
      c.connector_nonce = m.nonce;
      c.acceptor_nonce = ring::random_nonce();
      const ring::Transcript t = transcript(left_, c.connector_nonce, c.acceptor_nonce);
      if (!send_now(c.fd.get(), ring::encode_challenge(c.acceptor_nonce,
                                                       ring::transcript_mac(cfg_.token, ring::Role::Acceptor, t)))) {
        return drop("could not take the challenge");
      }
      c.challenged = true;
      return false;
    }
    if (m.type != ring::Type::Proof) return drop("sent a message of type " + std::to_string(uint32_t(m.type)) + " for its proof");
    const ring::Transcript t = transcript(left_, c.connector_nonce, c.acceptor_nonce);
    if (!ring::mac_equal(m.mac, ring::transcript_mac(cfg_.token, ring::Role::Connector, t))) {
      return drop("a hello as rank " + std::to_string(left_) + " without a valid proof (not the job's token, or a " +
                      "replayed set-up)",
                  ring::Verdict::BadProof);
    }
    if (!send_now(c.fd.get(), ring::encode_verdict(ring::Verdict::Accepted))) return drop("could not take the verdict");
    return true;
  }

  // Takes every connection waiting on the listener (non-blocking); beyond kMaxCandidates the
  // oldest is dropped.
  void accept_candidates(int listener, std::vector<Candidate>& cands, const std::string& what) {
    while (true) {
      Fd c(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
      if (c.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: none left (or out of descriptors: the next round tries again)
      }
      set_socket_options(c.get());
      if (cands.size() >= kMaxCandidates) {
        refused(what, cands.front().addr, "more than " + std::to_string(kMaxCandidates) +
                                              " connections setting up at once: the oldest goes");
        cands.erase(cands.begin());
      }
      Candidate cand;
      cand.addr = peer_address(c.get());
      cand.fd = std::move(c);
      cand.deadline = Clock::now() + std::min(cfg_.handshake_timeout, cfg_.timeout);
      cands.push_back(std::move(cand));
    }
  }

  ring::Transcript transcript(int connector, const ring::Nonce& cn, const ring::Nonce& an) const {
    return {cfg_.key_prefix, cfg_.job_id, uint32_t(cfg_.world), uint32_t(connector), cn, an};
  }

  void refused(const std::string& what, const std::string& addr, const std::string& why) {
    ++refused_;
    last_refusal_ = addr + ": " + why;
    if (cfg_.warn && refused_ <= kMaxWarnings) {
      cfg_.warn(what + ": refused a connection from " + last_refusal_ +
                (refused_ == kMaxWarnings ? " (further refusals are counted, not named)" : ""));
    }
  }

  // Connects send_fd_ to the right neighbour. With fixed endpoints (no store to say when the
  // peer listens) a refused connection is retried, with a growing pause, until the deadline.
  void connect_right(const sockaddr_in& raddr, Clock::time_point deadline, const std::string& what) {
    auto pause = ms(10);
    while (true) {
      send_fd_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (send_fd_.get() < 0) throw CommError(what + ": socket: " + errno_text(errno));
      set_socket_options(send_fd_.get());
      int err = 0;
      if (::connect(send_fd_.get(), reinterpret_cast<const sockaddr*>(&raddr), sizeof raddr) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          wait_fd(send_fd_.get(), POLLOUT, deadline, peer(right_), what);
          socklen_t elen = sizeof err;
          ::getsockopt(send_fd_.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
        }
      }
      if (err == 0) return;
      if (!cfg_.retry_connect || err != ECONNREFUSED || Clock::now() + pause >= deadline) {
        // It published its address, so it was there: refused or unreachable now means it is gone.
        lost(peer(right_), what + ": cannot connect to " + peer_name(right_) + ": " + errno_text(err));
      }
      std::this_thread::sleep_for(pause);  // a retry's back-off, bounded by the deadline
      pause = std::min(pause * 2, ms(500));
    }
  }

  void exchange(const void* send, size_t send_len, void* recv, size_t recv_len, const std::string& what) {
    transfer(static_cast<const uint8_t*>(send), send_len, true, static_cast<uint8_t*>(recv), recv_len, true,
             what);
  }

  // Sends one framed message to the right (when do_send) while receiving one from the left
  // (when do_recv), interleaved by poll so that neither direction waits on the other.
  void transfer(const uint8_t* send, size_t send_len, bool do_send, uint8_t* recv, size_t recv_len,
                bool do_recv, const std::string& what_op) {
    const std::string what = context(what_op);
    uint8_t shdr[kFrameHeader], rhdr[kFrameHeader];
    put_u32(shdr, kFrameMagic);
    put_u32(shdr + 4, send_seq_);
    put_u64(shdr + 8, send_len);
    size_t sent = 0, got = 0;
    const size_t send_total = do_send ? kFrameHeader + send_len : 0;
    const size_t recv_total = do_recv ? kFrameHeader + recv_len : 0;
    auto last_progress = Clock::now();
    while (sent < send_total || got < recv_total) {
      pollfd fds[2];
      int n = 0, si = -1, ri = -1;
      if (sent < send_total) {
        si = n;
        fds[n++] = pollfd{send_fd_.get(), POLLOUT, 0};
      }
      if (got < recv_total) {
        ri = n;
        fds[n++] = pollfd{recv_fd_.get(), POLLIN, 0};
      }
      const int rc = ::poll(fds, nfds_t(n), untimed_ ? -1 : remaining_ms(last_progress + cfg_.timeout));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) throw CommError(what + ": poll: " + errno_text(errno));
      if (rc == 0) {
        const int peer = got < recv_total ? left_ : right_;
        lost(this->peer(peer), what + ": no progress for " + std::to_string(cfg_.timeout.count()) +
                                   " ms waiting for " + peer_name(peer) + " (hung or stopped)");
      }
      if (si >= 0 && fds[si].revents) {
        while (sent < send_total) {
          const uint8_t* p = sent < kFrameHeader ? shdr + sent : send + (sent - kFrameHeader);
          const size_t n_left = sent < kFrameHeader ? kFrameHeader - sent : send_total - sent;
          const ssize_t k = ::send(send_fd_.get(), p, n_left, MSG_NOSIGNAL);
          if (k > 0) {
            sent += size_t(k);
            last_progress = Clock::now();
          } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
          } else if (k < 0 && errno != EINTR) {
            lost(peer(right_), what + ": " + peer_name(right_) + " is gone (" + errno_text(errno) + ")");
          }
        }
      }
      if (ri >= 0 && fds[ri].revents) {
        while (got < recv_total) {
          uint8_t* p = got < kFrameHeader ? rhdr + got : recv + (got - kFrameHeader);
          const size_t n_left = got < kFrameHeader ? kFrameHeader - got : recv_total - got;
          const ssize_t k = ::recv(recv_fd_.get(), p, n_left, 0);
          if (k > 0) {
            got += size_t(k);
            last_progress = Clock::now();
            if (got == kFrameHeader) check_header(rhdr, recv_len, what);
          } else if (k == 0) {
            lost(peer(left_), what + ": " + peer_name(left_) + " closed the connection (exited or failed)");
          } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
          } else if (errno != EINTR) {
            lost(peer(left_), what + ": receiving from " + peer_name(left_) + ": " + errno_text(errno));
          }
        }
      }
    }
    if (do_send) ++send_seq_;
    if (do_recv) ++recv_seq_;
  }

  void check_header(const uint8_t* h, size_t expected_len, const std::string& what) {
    if (get_u32(h) != kFrameMagic) throw CommError(what + ": " + peer_name(left_) + " sent a malformed frame");
    if (get_u32(h + 4) != recv_seq_ || get_u64(h + 8) != expected_len) {
      throw CommError(what + ": " + peer_name(left_) + " is out of step (message " + std::to_string(get_u32(h + 4)) +
                      " of " + std::to_string(get_u64(h + 8)) + " bytes, expected message " +
                      std::to_string(recv_seq_) + " of " + std::to_string(expected_len) +
                      " bytes): ranks called different collectives");
    }
  }

  RingConfig cfg_;
  int left_ = 0, right_ = 0;
  std::string left_addr_, right_addr_;
  Fd send_fd_, recv_fd_;
  // The set-up as connector (to the right neighbour): this rank's nonce, the message being read,
  // the PROOF sent, the VERDICT received.
  struct {
    ring::Nonce nonce{};
    std::string in;
    bool proved = false, done = false;
  } conn_;
  int refused_ = 0;  // connections to this rank's port refused or dropped during the set-up
  std::string last_refusal_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  bool untimed_ = false;  // in barrier_untimed(): no silence limit (a closed peer still fails)
  size_t chunk_elems_ = 1;
  std::vector<float> tmp_;
};

}  // namespace

std::unique_ptr<Comm> make_ring_comm(const RingConfig& cfg, Rendezvous& rendezvous) {
  if (cfg.world < 1 || cfg.rank < 0 || cfg.rank >= cfg.world) {
    throw CommError("ring: rank " + std::to_string(cfg.rank) + " of " + std::to_string(cfg.world) + " is invalid");
  }
  if (cfg.world == 1) return make_single_process_comm();
  return std::make_unique<RingComm>(cfg, rendezvous);
}

}  // namespace worker
