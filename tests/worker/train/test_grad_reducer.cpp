// The gradient buckets, each rank's shard of them (worker/train/shard.h) and the reducer that
// launches one collective per bucket as backward finishes it (worker/train/grad_reducer.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "worker/train/grad_reducer.h"
#include "worker/train/shard.h"

using namespace worker;

namespace {

// Records which elements each collective covered, and which collective it was.
class RecordingComm : public Comm {
 public:
  explicit RecordingComm(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum(float* data, size_t count) override { record("allreduce", data, count); }
  void reduce_scatter_sum(float* data, size_t count) override { record("reduce_scatter", data, count); }
  void allgather(float* data, size_t count) override { record("allgather", data, count); }
  void broadcast(void*, size_t, int) override {}
  void wait() override { ++waits; }
  void allgather_host(const void*, void*, size_t) override {}
  void barrier_untimed() override {}
  struct Call {
    std::string what;
    size_t offset, count;
  };
  std::vector<Call> calls;
  int waits = 0;

 private:
  void record(const char* what, const float* data, size_t count) { calls.push_back({what, size_t(data - base_), count}); }
  const float* base_;
};

// Every element covered exactly once by collectives named `what`.
void check_cover(const RecordingComm& c, size_t n, const std::string& what) {
  std::vector<int> hits(n, 0);
  for (const auto& call : c.calls) {
    REQUIRE(call.what == what);
    for (size_t i = call.offset; i < call.offset + call.count; ++i) hits[i]++;
  }
  for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
}

}  // namespace

TEST_CASE("shard layout: buckets from the end, equal blocks, every element owned once", "[train][zero]") {
  for (int world : {1, 2, 3, 4, 7}) {
    for (size_t count : {size_t(1), size_t(5), size_t(100), size_t(703386)}) {
      for (size_t bucket : {size_t(1), size_t(16), size_t(1000), size_t(1) << 30}) {
        INFO("world " << world << ", count " << count << ", bucket " << bucket);
        std::vector<int> owner(count, -1);
        for (int r = 0; r < world; ++r) {
          const ShardLayout l = make_shard_layout(count, bucket, r, world);
          REQUIRE(l.owned.size() == l.buckets.size());
          size_t end = count, total = 0;
          for (size_t k = 0; k < l.buckets.size(); ++k) {
            const Bucket& b = l.buckets[k];
            REQUIRE(b.end == end);  // contiguous, from the end towards the start
            REQUIRE(b.size() > 0);
            if (k + 1 < l.buckets.size()) {  // all but the buffer's first: equal blocks for NCCL
              REQUIRE(b.size() % size_t(world) == 0);
              REQUIRE(b.size() == l.buckets[0].size());
            }
            const ParamView& o = l.owned[k];
            REQUIRE(o.offset >= b.begin);
            REQUIRE(o.offset + o.count <= b.end);
            size_t taken = 0;
            for (size_t i = o.offset; i < o.offset + o.count; ++i) {
              taken += owner[i] != -1;
              owner[i] = r;
            }
            REQUIRE(taken == 0);
            total += o.count;
            end = b.begin;
          }
          REQUIRE(end == 0);
          REQUIRE(l.owned_total == total);
          // The goal of issue 15: at most 1/world of the buffer plus one element per bucket.
          REQUIRE(total <= count / size_t(world) + l.buckets.size());
        }
        CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
      }
    }
  }
  CHECK_THROWS_AS(make_shard_layout(0, 10, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(make_shard_layout(10, 10, 2, 2), std::invalid_argument);
}

TEST_CASE("the reducer covers the buffer exactly once, bucket by bucket", "[train][reducer]") {
  std::vector<float> g(100);
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  const std::vector<Ranges> patterns = {
      {},                                               // no callbacks: everything at the end
      {{90, 100}, {70, 90}, {40, 70}, {0, 40}},         // the model's order, whole buffer
      {{90, 100}, {50, 70}, {40, 50}},                  // a gap (70..90) and an unreported start
      {{0, 10}, {90, 100}, {80, 90}},                   // out of order first
      {{95, 100}, {95, 100}, {94, 95}},                 // a repeated range
  };
  for (Reduction how : {Reduction::AllReduce, Reduction::ReduceScatter}) {
    for (size_t bucket : {size_t(1), size_t(15), size_t(1000)}) {
      const ShardLayout layout = make_shard_layout(g.size(), bucket, 0, 2);
      for (const auto& p : patterns) {
        RecordingComm c(g.data());
        GradReducer r(c, g.data(), layout, how);
        r.begin();
        for (auto [b, e] : p) r.ready(b, e);
        r.finish();
        INFO("bucket " << bucket << ", " << p.size() << " callbacks");
        check_cover(c, g.size(), how == Reduction::AllReduce ? "allreduce" : "reduce_scatter");
        REQUIRE(c.calls.size() == layout.buckets.size());
        for (size_t k = 0; k < c.calls.size(); ++k) {  // the layout's buckets, in its order
          CHECK(c.calls[k].offset == layout.buckets[k].begin);
          CHECK(c.calls[k].count == layout.buckets[k].size());
        }
        CHECK(c.waits == 1);
      }
    }
  }
}

TEST_CASE("a bucket is reduced during backward as soon as all of it is final", "[train][reducer]") {
  std::vector<float> g(100);
  const ShardLayout layout = make_shard_layout(g.size(), 30, 0, 2);  // [70,100) [40,70) [10,40) [0,10)
  RecordingComm c(g.data());
  GradReducer r(c, g.data(), layout, Reduction::ReduceScatter);
  r.begin();
  r.ready(90, 100);
  CHECK(c.calls.empty());  // [70, 100) is not final yet
  r.ready(65, 90);
  REQUIRE(c.calls.size() == 1);
  CHECK(c.calls[0].offset == 70);
  CHECK(c.calls[0].count == 30);
  r.ready(5, 65);  // finishes [40, 70) and [10, 40)
  CHECK(c.calls.size() == 3);
  CHECK(c.waits == 0);
  r.finish();
  check_cover(c, g.size(), "reduce_scatter");
}
