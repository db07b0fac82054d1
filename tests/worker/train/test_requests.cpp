// The ranks' agreement on stop and checkpoint requests (worker/train/requests.h): the decision
// rule as a pure function, and the one-boundary-late exchange over a simulated job whose ranks
// receive their signals at different boundaries.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "worker/train/requests.h"

using namespace worker;

TEST_CASE("agree: the first stop signal in rank order; a save when any rank has one unanswered", "[train][requests]") {
  Verdict v = agree({{0, 0}, {15, 0}, {2, 1}});
  CHECK(v.stop_signal == 15);
  CHECK(v.save);
  v = agree({{0, 0}, {0, 0}});
  CHECK((v.stop_signal == 0 && !v.save));
}

namespace {

// A job of `world` ranks in one thread: each rank's exchange number k reads what every rank
// sent in its exchange number k, as a collective does. Calls must come in lockstep (every rank
// starts exchange k before any finishes it), as the ranks' boundaries do.
struct Board {
  explicit Board(int w) : world(w) {}
  int world;
  std::vector<std::vector<std::vector<uint8_t>>> rounds;  // [exchange][rank] -> bytes
};

class BoardComm final : public Comm {
 public:
  BoardComm(Board& b, int rank) : b_(b), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return b_.world; }
  void allreduce_sum(float*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void wait() override {}
  void reduce_scatter_sum(float*, size_t) override {}
  void allgather(float*, size_t) override {}
  void barrier_untimed() override {}
  // The blocking one (RequestAgreement's first question, whether any rank listens): as if every
  // rank were this one.
  void allgather_host(const void* send, void* recv, size_t bytes) override {
    for (int r = 0; r < b_.world; ++r) std::memcpy(static_cast<uint8_t*>(recv) + size_t(r) * bytes, send, bytes);
  }
  void allgather_host_start(const void* send, void* recv, size_t bytes) override {
    const size_t k = started_++;
    if (b_.rounds.size() <= k) b_.rounds.resize(k + 1, std::vector<std::vector<uint8_t>>(size_t(b_.world)));
    const auto* p = static_cast<const uint8_t*>(send);
    b_.rounds[k][size_t(rank_)].assign(p, p + bytes);
    recv_ = recv;
    bytes_ = bytes;
  }
  void allgather_host_finish() override {
    const size_t k = finished_++;
    REQUIRE(k < started_);
    for (int r = 0; r < b_.world; ++r) {
      const std::vector<uint8_t>& part = b_.rounds[k][size_t(r)];
      REQUIRE(part.size() == bytes_);  // rank r has started exchange k: lockstep
      std::memcpy(static_cast<uint8_t*>(recv_) + size_t(r) * bytes_, part.data(), bytes_);
    }
  }

 private:
  Board& b_;
  int rank_;
  size_t started_ = 0, finished_ = 0;
  void* recv_ = nullptr;
  size_t bytes_ = 0;
};

struct Rank {
  std::atomic<int> saves{0}, stop{0};
  std::unique_ptr<BoardComm> comm;
  std::unique_ptr<RequestAgreement> agreement;
};

// Runs `boundaries` step boundaries on every rank; before boundary b, signal(b, ranks) may
// deliver signals. Returns the verdicts, [boundary][rank].
template <typename Signal>
std::vector<std::vector<Verdict>> run_job(int world, int boundaries, Signal signal) {
  Board board(world);
  std::vector<Rank> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    Rank& k = ranks[size_t(r)];
    k.comm = std::make_unique<BoardComm>(board, r);
    k.agreement = std::make_unique<RequestAgreement>(Requests{&k.saves, &k.stop}, *k.comm);
  }
  std::vector<std::vector<Verdict>> out;
  for (int b = 0; b < boundaries; ++b) {
    signal(b, ranks);
    std::vector<Verdict> v;
    for (Rank& k : ranks) v.push_back(k.agreement->at_boundary());
    out.push_back(v);
  }
  std::vector<Verdict> last;
  for (Rank& k : ranks) last.push_back(k.agreement->drain());
  out.push_back(last);
  return out;
}

// Every rank reached the same verdict at every boundary; the boundaries where it was "act".
template <typename Pred>
std::vector<int> acting_boundaries(const std::vector<std::vector<Verdict>>& v, Pred act) {
  std::vector<int> at;
  for (size_t b = 0; b < v.size(); ++b) {
    for (const Verdict& x : v[b]) {
      REQUIRE(x.stop_signal == v[b][0].stop_signal);
      REQUIRE(x.save == v[b][0].save);
    }
    if (act(v[b][0])) at.push_back(int(b));
  }
  return at;
}

}  // namespace

TEST_CASE("requests: a stop signal to one rank stops every rank at the same boundary, one late", "[train][requests]") {
  for (int target : {0, 2}) {
    INFO("signal to rank " << target);
    const auto v = run_job(3, 8, [&](int b, std::vector<Rank>& ranks) {
      if (b == 4) ranks[size_t(target)].stop = 15;  // arrives during step 3 (before boundary 4)
    });
    CHECK(acting_boundaries(v, [](const Verdict& x) { return x.stop_signal != 0; }) == std::vector<int>{5, 6, 7, 8});
    CHECK(v[5][1].stop_signal == 15);
  }
}

TEST_CASE("requests: one save per checkpoint signal, whichever ranks it reached and when", "[train][requests]") {
  // To rank 1 only; later one to every rank, reaching rank 0 a boundary before the others.
  const auto v = run_job(3, 9, [](int b, std::vector<Rank>& ranks) {
    if (b == 1) ranks[1].saves += 1;
    if (b == 4) ranks[0].saves += 1;
    if (b == 5) {
      ranks[1].saves += 1;
      ranks[2].saves += 1;
    }
  });
  CHECK(acting_boundaries(v, [](const Verdict& x) { return x.save; }) == std::vector<int>{2, 5});
  CHECK(acting_boundaries(v, [](const Verdict& x) { return x.stop_signal != 0; }).empty());
}

TEST_CASE("requests: a signal in the last step is the drain's", "[train][requests]") {
  const auto v = run_job(2, 3, [](int b, std::vector<Rank>& ranks) {
    if (b == 2) ranks[1].stop = 2;
  });
  CHECK(acting_boundaries(v, [](const Verdict& x) { return x.stop_signal != 0; }) == std::vector<int>{3});
}

TEST_CASE("requests: a single process acts at once; nothing to listen for, no exchange", "[train][requests]") {
  std::unique_ptr<Comm> one = make_single_process_comm();
  std::atomic<int> saves{0}, stop{0};
  RequestAgreement a(Requests{&saves, &stop}, *one);
  CHECK_FALSE(a.at_boundary().save);
  saves = 1;
  CHECK(a.at_boundary().save);
  CHECK_FALSE(a.at_boundary().save);
  stop = 15;
  CHECK(a.at_boundary().stop_signal == 15);

  Board board(2);
  BoardComm c0(board, 0), c1(board, 1);
  RequestAgreement n0(Requests{}, c0), n1(Requests{}, c1);
  for (int b = 0; b < 3; ++b) {
    n0.at_boundary();
    n1.at_boundary();
  }
  CHECK(board.rounds.empty());  // no rank has a handler: no per-step exchange
}
