// fp16's conv+genstats pairing (worker/gpu/stats_pairing.h), without a GPU: a batch norm takes a
// convolution's sums only when it reads exactly that output with nothing written over it since and the
// slot still holds them; which calls are predicted to feed a training batch norm (forward, --recompute
// block's recomputations, a validation pass); which slots must be zeroed.
#include <catch2/catch.hpp>

#include <cstddef>

#include "worker/gpu/stats_pairing.h"

using worker::gpu::Range;
using worker::gpu::StatsPairing;

namespace {

// Fake buffers: only their addresses are used.
alignas(256) char g_mem[16 * 4096];
char* at(int k) { return g_mem + size_t(k) * 4096; }
constexpr size_t kAct = 4096, kSlot = 512;

StatsPairing::Conv conv(int slot, int x, int y, bool backward = false) {
  return {{at(slot), kSlot}, at(x), {at(y), kAct}, backward};
}

}  // namespace

TEST_CASE("stats pairing: a training batch norm takes the sums of exactly the output that wrote them",
          "[gpu_host]") {
  StatsPairing p;
  const auto c = conv(0, 1, 2);
  p.conv_wrote(c, true);
  CHECK(p.needs_zero(at(0)));                  // written, not taken yet
  CHECK(p.train_reads(at(3), kAct) == nullptr);  // another tensor
  CHECK(p.train_reads(at(2), kAct / 2) == nullptr);  // part of the output only
  CHECK(p.holds_sums(at(2), kAct));
  CHECK(p.holds_sums(at(2), kAct));  // asking takes nothing
  CHECK_FALSE(p.holds_sums(at(2), kAct / 2));
  CHECK(p.train_reads(at(2), kAct) == at(0));
  CHECK_FALSE(p.holds_sums(at(2), kAct));
  CHECK_FALSE(p.needs_zero(at(0)));            // the finalize zeroes what it takes
  CHECK(p.train_reads(at(2), kAct) == nullptr);  // taken once: a second batch norm computes its own
}

TEST_CASE("stats pairing: a write over any byte of the output, or the slot written again, drops the sums",
          "[gpu_host]") {
  StatsPairing p;
  p.conv_wrote(conv(0, 1, 2), true);
  p.written(at(2) + kAct - 1, 1);  // the output's last byte
  CHECK(p.train_reads(at(2), kAct) == nullptr);
  CHECK(p.needs_zero(at(0)));  // the sums stay in the slot until zeroed

  p.zeroed(at(0));
  p.conv_wrote(conv(0, 1, 2), true);
  p.written(at(3), kAct);  // beside it: no effect
  p.written(at(1), kAct);  // its input: no effect (the sums describe y)
  CHECK(p.train_reads(at(2), kAct) == at(0));

  // The same shape (slot) writes another output before the first one's batch norm: the first loses them.
  p.conv_wrote(conv(0, 1, 2), true);
  p.conv_wrote(conv(0, 3, 4), true);
  CHECK(p.train_reads(at(2), kAct) == nullptr);
  CHECK(p.train_reads(at(4), kAct) == at(0));

  // A convolution without sums over an output that had them.
  p.conv_wrote(conv(5, 1, 6), true);
  p.conv_wrote(conv(5, 1, 6), false);
  CHECK(p.train_reads(at(6), kAct) == nullptr);
  CHECK(p.needs_zero(at(5)));
}

TEST_CASE("stats pairing: two outputs pending at once (a downsample block's c2, then cd and its batch norm)",
          "[gpu_host]") {
  StatsPairing p;
  p.conv_wrote(conv(0, 1, 2), true);  // c2
  p.conv_wrote(conv(1, 3, 4), true);  // cd
  CHECK(p.train_reads(at(4), kAct) == at(1));
  p.written(at(5), kAct);  // bd's output
  CHECK(p.train_reads(at(2), kAct) == at(0));
}

TEST_CASE("stats pairing: a call writes sums where its output fed a training batch norm last time",
          "[gpu_host]") {
  StatsPairing p;
  const auto fwd = conv(0, 1, 2), recompute = conv(0, 1, 2, /*backward=*/true);
  CHECK_FALSE(p.predicted(fwd));  // never seen
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    CHECK(p.predicted(fwd) == (step > 0));
    p.conv_wrote(fwd, p.predicted(fwd));
    p.train_reads(at(2), kAct);  // the forward's batch norm
    // --recompute block: the same convolution again in backward, whose output no batch norm reads. Not
    // seen in backward yet, it goes as in forward (once).
    CHECK(p.predicted(recompute) == (step == 0));
    p.conv_wrote(recompute, p.predicted(recompute));
    p.written(at(7), kAct);  // backward's other work
    p.zeroed(at(0));          // (the sums the recomputation may have written, zeroed before the next)
  }
  CHECK(p.predicted(fwd));
  CHECK_FALSE(p.predicted(recompute));

  // Overwritten unread: not predicted any more.
  p.conv_wrote(fwd, true);
  p.written(at(2), kAct);
  CHECK_FALSE(p.predicted(fwd));
  CHECK(p.needs_zero(at(0)));
}

TEST_CASE("stats pairing: a validation pass leaves the prediction as training left it", "[gpu_host]") {
  StatsPairing p;
  const auto c = conv(0, 1, 2);
  p.conv_wrote(c, false);
  p.train_reads(at(2), kAct);
  p.conv_wrote(c, false);  // the validation's convolution (the backend runs it plain)
  p.eval_reads(at(2), kAct);
  p.conv_wrote(c, false);  // overwritten: what the evaluation read says nothing about training
  CHECK(p.predicted(c));
}

TEST_CASE("stats pairing: untaken sums are dropped and their slots listed for zeroing", "[gpu_host]") {
  StatsPairing p;
  p.conv_wrote(conv(0, 1, 2), true);
  p.conv_wrote(conv(1, 1, 3), true);
  CHECK(p.train_reads(at(3), kAct) == at(1));
  const auto slots = p.drop_untaken();
  REQUIRE(slots.size() == 1);
  CHECK(slots[0].p == at(0));
  CHECK(slots[0].bytes == kSlot);
  CHECK_FALSE(p.needs_zero(at(0)));
  CHECK(p.train_reads(at(2), kAct) == nullptr);  // zeroed: the sums are gone
  CHECK(p.drop_untaken().empty());
  CHECK(p.live() == 2);
}
