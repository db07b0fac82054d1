// The two streams' range rules (worker/gpu/ranges.h), without a GPU: which pending side task a
// main-stream write waits for, and how the cuDNN workspace is shared, above all the overlap case
// of 259d62f (a weight gradient whose end of the workspace reached into what the data gradient
// just before it took ran at once with it; 2 GPU ranks ended 1.07 away from 2 CPU ranks).
#include <catch2/catch.hpp>

#include <cstddef>

#include "worker/gpu/ranges.h"

using worker::gpu::overlaps;
using worker::gpu::PendingRanges;
using worker::gpu::Range;
using worker::gpu::WorkspaceRanges;

namespace {

// Fake buffers: only their addresses are used. Aligned like the device pool's (256 bytes), so
// that where a side piece starts is known.
alignas(256) char g_mem[3 * 8192];
char* const kBuf = g_mem;            // 4096 bytes
char* const kGrown = g_mem + 8192;   // 8192 bytes: the buffer after it grew

}  // namespace

TEST_CASE("ranges: overlap is a shared byte", "[gpu_host]") {
  const Range r{kBuf + 100, 50};  // [100, 150)
  CHECK(overlaps(r, kBuf + 149, 1));
  CHECK(overlaps(r, kBuf, 101));
  CHECK(overlaps(r, kBuf + 120, 1000));
  CHECK_FALSE(overlaps(r, kBuf + 150, 10));  // adjacent after
  CHECK_FALSE(overlaps(r, kBuf + 90, 10));   // adjacent before
  CHECK_FALSE(overlaps(r, kBuf + 120, 0));   // an empty write
  CHECK_FALSE(overlaps({kBuf + 100, 0}, kBuf, 4096));  // an empty range
}

TEST_CASE("ranges: a main-stream write waits for the latest pending task that uses its bytes", "[gpu_host]") {
  PendingRanges p;
  CHECK_FALSE(p.latest_conflict(kBuf, 4096));
  p.push({{kBuf, 100}}, {{kBuf + 1000, 100}});        // task 0 reads [0, 100), writes [1000, 1100)
  p.push({}, {{kBuf + 2000, 100}});                   // task 1 writes [2000, 2100)
  p.push({{kBuf + 50, 10}}, {{kBuf + 3000, 100}});    // task 2 reads [50, 60) too
  CHECK(p.size() == 3);
  CHECK(p.latest_conflict(kBuf + 1050, 1) == size_t(0));  // a write over what task 0 writes
  CHECK(p.latest_conflict(kBuf + 2099, 1) == size_t(1));
  CHECK(p.latest_conflict(kBuf, 4096) == size_t(2));      // waiting for 2 covers 0 and 1
  CHECK(p.latest_conflict(kBuf + 55, 1) == size_t(2));    // read by tasks 0 and 2: the later one
  CHECK(p.latest_conflict(kBuf + 10, 1) == size_t(0));    // read by task 0 only
  CHECK_FALSE(p.latest_conflict(kBuf + 1100, 900));       // between them: no wait
  p.drop_through(0);
  CHECK(p.size() == 2);
  CHECK_FALSE(p.latest_conflict(kBuf + 1050, 1));
  CHECK(p.latest_conflict(kBuf + 2050, 1) == size_t(0));  // task 1 is now the first
  p.drop_through(1);
  CHECK(p.size() == 0);
}

TEST_CASE("workspace: the main stream takes the start, a side task the end", "[gpu_host]") {
  WorkspaceRanges w;
  w.place(kBuf, 4096);
  const Range m = w.main(1000);
  CHECK(m.p == kBuf);
  CHECK(m.bytes == 1000);
  bool refork = true;
  w.fork();
  char* s = w.side(1000, &refork);
  CHECK(s == kBuf + 3072);  // 4096 - 1000 = 3096, down to the 256-byte boundary
  CHECK_FALSE(refork);
  const Range used = w.end_task();
  CHECK(used.p == kBuf + 3072);
  CHECK(used.bytes == 1024);  // to the buffer's end
  CHECK_FALSE(w.forking());
  CHECK(w.end_task().bytes == 0);  // a task that took no workspace
}

TEST_CASE("workspace: 259d62f, a weight gradient reaching into its data gradient's piece forks again",
          "[gpu_host]") {
  WorkspaceRanges w;
  w.place(kBuf, 4096);
  bool refork = false;

  SECTION("overlap: the side piece starts inside what the data gradient took") {
    w.fork();     // conv_backward: the weight gradient's task forks before the data gradient
    w.main(3000);  // the data gradient takes [0, 3000) and may still run
    char* s = w.side(2000, &refork);  // [2048, 4096)
    CHECK(s == kBuf + 2048);
    CHECK(refork);  // the task must wait for the data gradient
    const Range used = w.end_task();
    CHECK(used.p == kBuf + 2048);
    CHECK(used.bytes == 2048);
  }
  SECTION("the boundary: a piece that starts where the data gradient's ends does not wait") {
    w.fork();
    w.main(2048);
    w.side(2000, &refork);  // starts at 2048
    CHECK_FALSE(refork);
    w.end_task();
    w.fork();
    w.main(2049);
    w.side(2000, &refork);
    CHECK(refork);
  }
  SECTION("the alignment counts: 2000 bytes at the end start below 4096 - 2000") {
    w.fork();
    w.main(2060);  // below 4096 - 2000 = 2096, above the aligned start 2048
    w.side(2000, &refork);
    CHECK(refork);
  }
  SECTION("the largest main piece since the fork counts") {
    w.fork();
    w.main(3000);
    w.main(100);
    w.side(2000, &refork);
    CHECK(refork);
  }
  SECTION("main-stream work before the fork does not count (the fork orders the task after it)") {
    w.main(4096);
    w.fork();
    w.side(2000, &refork);
    CHECK_FALSE(refork);
  }
  SECTION("after the task's end, the main stream's pieces do not count for the next task") {
    w.fork();
    w.main(3000);
    w.end_task();
    w.main(3000);  // not forking: no task beside it
    w.fork();
    w.side(2000, &refork);
    CHECK_FALSE(refork);
  }
  SECTION("the buffer grew after the data gradient took its piece: the side piece is in the new one") {
    w.fork();
    w.main(3000);               // in the old buffer
    w.place(kGrown, 8192);      // the weight gradient needed more
    char* s = w.side(6000, &refork);
    CHECK(s == kGrown + 2048);  // below 3000 bytes into the new buffer, but nothing runs there
    CHECK_FALSE(refork);
  }
  SECTION("the buffer grew for the data gradient: its piece in the new buffer counts") {
    w.fork();
    w.place(kGrown, 8192);
    w.main(3000);
    w.side(6000, &refork);  // [2048, 8192) of the new buffer
    CHECK(refork);
  }
  SECTION("two side pieces of one task: the record covers both") {
    w.fork();
    w.side(1000, &refork);  // [3072, 4096)
    w.side(3000, &refork);  // [1024, 4096)
    const Range used = w.end_task();
    CHECK(used.p == kBuf + 1024);
    CHECK(used.bytes == 3072);
  }
}

TEST_CASE("workspace and pending tasks: the next main-stream piece waits for a task using the end",
          "[gpu_host]") {
  // The other half of the rule: the task is recorded with its piece as written, so the main
  // stream's next piece over it (a larger convolution's, or the next step's) waits for the task.
  WorkspaceRanges w;
  PendingRanges pending;
  w.place(kBuf, 4096);
  bool refork = false;
  w.fork();
  w.main(1000);
  w.side(2000, &refork);
  CHECK_FALSE(refork);  // [2048, 4096) beside [0, 1000): they run at once
  const Range used = w.end_task();
  pending.push({}, {used});
  const Range small = w.main(2048);
  CHECK_FALSE(pending.latest_conflict(small.p, small.bytes));  // [0, 2048): no wait
  const Range large = w.main(3000);
  CHECK(pending.latest_conflict(large.p, large.bytes) == size_t(0));  // reaches into the task's piece
}

// The outputs the fused prologue left unwritten (GpuOps::bn_relu_conv_forward_train): a write over any
// byte drops one (it holds what was written), a read of any byte takes it (to be written first), and an
// output recorded again at its address replaces the old record.
TEST_CASE("ranges: unwritten outputs are dropped by a write and taken by a read that touch them", "[gpu_host]") {
  worker::gpu::UnwrittenRanges<int> u;
  CHECK(u.empty());
  u.add(kBuf, 100, 1);         // [0, 100)
  u.add(kBuf + 200, 100, 2);   // [200, 300)
  u.add(kBuf + 400, 100, 3);   // [400, 500)
  REQUIRE(u.size() == 3);
  REQUIRE(u.find(kBuf + 200));
  CHECK(*u.find(kBuf + 200) == 2);
  CHECK(u.find(kBuf + 201) == nullptr);  // by its address only

  u.written(kBuf + 100, 100);  // [100, 200): touches neither neighbour
  CHECK(u.size() == 3);
  u.written(kBuf + 299, 1);    // the last byte of the second
  CHECK(u.size() == 2);
  CHECK(u.find(kBuf + 200) == nullptr);

  CHECK(u.take(kBuf + 100, 100).empty());  // a read between them takes nothing
  const auto due = u.take(kBuf + 50, 400);  // [50, 450): the first and the third
  REQUIRE(due.size() == 2);
  CHECK(due[0].first.p == kBuf);
  CHECK(due[0].first.bytes == 100);
  CHECK(due[0].second == 1);
  CHECK(due[1].first.p == kBuf + 400);
  CHECK(due[1].second == 3);
  CHECK(u.empty());

  u.add(kBuf, 100, 4);
  u.add(kBuf, 50, 5);  // the same output recorded again (another layer's, at that address)
  REQUIRE(u.size() == 1);
  CHECK(*u.find(kBuf) == 5);
  u.add(kBuf + 40, 20, 6);  // overlapping a recorded one: that one is overwritten by it
  CHECK(u.size() == 1);
  CHECK(*u.find(kBuf + 40) == 6);
}
