#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "worker/train/grad_reducer.h"

using worker::GradReducer;

namespace {

// Records which elements each all-reduce covered.
class RecordingComm : public worker::Comm {
 public:
  explicit RecordingComm(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum(float* data, size_t count) override { calls.emplace_back(size_t(data - base_), count); }
  void broadcast(void*, size_t, int) override {}
  void wait() override { ++waits; }
  void allgather_host(const void*, void*, size_t) override {}
  std::vector<std::pair<size_t, size_t>> calls;  // (offset, count)
  int waits = 0;

 private:
  const float* base_;
};

// Every element reduced exactly once.
void check_cover(const RecordingComm& c, size_t n) {
  std::vector<int> hits(n, 0);
  for (auto [off, cnt] : c.calls)
    for (size_t i = off; i < off + cnt; ++i) hits[i]++;
  for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
}

}  // namespace

TEST_CASE("bucketed all-reduce covers the buffer exactly once", "[train][reducer]") {
  std::vector<float> g(100);
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  const std::vector<Ranges> patterns = {
      {},                                               // no callbacks: one reduction at the end
      {{90, 100}, {70, 90}, {40, 70}, {0, 40}},         // the model's order, whole buffer
      {{90, 100}, {50, 70}, {40, 50}},                  // a gap (70..90) and an unreported start
      {{0, 10}, {90, 100}, {80, 90}},                   // out of order first
      {{95, 100}, {95, 100}, {94, 95}},                 // a repeated range
  };
  for (size_t bucket : {size_t(1), size_t(15), size_t(1000)}) {
    for (const auto& p : patterns) {
      RecordingComm c(g.data());
      GradReducer r(c, g.data(), g.size(), bucket);
      r.begin();
      for (auto [b, e] : p) r.ready(b, e);
      r.finish();
      INFO("bucket " << bucket << ", " << p.size() << " callbacks");
      check_cover(c, g.size());
      CHECK(c.waits == 1);
    }
  }
}

TEST_CASE("buckets are reduced while backward runs once they are large enough", "[train][reducer]") {
  std::vector<float> g(100);
  RecordingComm c(g.data());
  GradReducer r(c, g.data(), g.size(), 25);
  r.begin();
  r.ready(90, 100);
  CHECK(c.calls.empty());  // 10 < 25: still pending
  r.ready(70, 90);
  REQUIRE(c.calls.size() == 1);  // 30 >= 25: reduced during backward
  CHECK(c.calls[0] == std::make_pair(size_t(70), size_t(30)));
  r.ready(0, 70);
  r.finish();
  check_cover(c, g.size());
}
